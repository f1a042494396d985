"""Helpers for testing the checks themselves: run a contract's falsifier the way pv's harness
does (check(device=..., **params, tolerance=merged table) then judge the prediction), without
pytest plugin or ledger."""

from __future__ import annotations

import inspect

from pathlib import Path

from pv import expr, tolerance as tolerances
from pv.harness import load_check
from pv.loader import load_contract

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = ROOT / "contracts"


def contract(contract_id: str):
    files = [p for p in CONTRACTS.glob("*.yaml") if p.name.rsplit("-v", 1)[0] == contract_id]
    assert files, f"no contract {contract_id}"
    loaded, diagnostics = load_contract(files[0])
    assert loaded is not None and loaded.contract is not None, diagnostics
    return loaded.contract


def all_falsifiers():
    """(contract id, falsifier) for every falsifier of every contract."""
    out = []
    for path in sorted(CONTRACTS.glob("*.yaml")):
        loaded, _ = load_contract(path)
        for f in loaded.contract.falsification_tests:
            out.append((loaded.contract.metadata.id, f))
    return out


def observe(contract_id: str, falsifier_id: str, device: str = "cpu", **overrides):
    """Call the falsifier's check as the harness would; returns (observations, judgement)."""
    c = contract(contract_id)
    f = c.falsifier(falsifier_id)
    assert f is not None and f.check, f"{falsifier_id} is not bound"
    check = load_check(f.check)
    kwargs = {**f.params, **overrides, "device": device}
    if f.runtimes and "runtime" not in kwargs:
        # a pack check drives the runtime through its adapter: the falsifier's first runtime
        # (the project's own, pvlab), as its generated test's first cell does
        from pv import runtimes

        kwargs["runtime"] = runtimes.adapter(f.runtimes[0])
    if f.subjects and "subject" in inspect.signature(check).parameters and "subject" not in kwargs:
        kwargs["subject"] = kwargs.pop("checkpoint", f.subjects[0])
    if tolerances.wants_tolerance(check):
        kwargs["tolerance"] = tolerances.merged(f.tolerance)
    observations = check(**kwargs)
    return observations, expr.judge(f.prediction, observations)




def assert_holds_and_killed(contract_id: str, falsifier_id: str, bug: str) -> None:
    """The falsifier's prediction holds on the runtime as it is and is false with planted bug
    `bug` (a registered mutant) in effect: what `pv strength` calls killed, in one test."""
    from pvlab.falsifiers.mutants import registry

    observations, judgement = observe(contract_id, falsifier_id)
    assert judgement.holds, (falsifier_id, observations)
    with registry()[bug]():
        observations, judgement = observe(contract_id, falsifier_id)
    assert not judgement.holds, (falsifier_id, bug, observations)
