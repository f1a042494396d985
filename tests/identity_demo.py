"""The demo workspace the identity tests share (tests/test_identity*.py), and independent
definitions of the "test3" and "test4" digests of a generated test (tests/test_testdigest.py),
written from what they cover rather than by calling pv's own."""

from __future__ import annotations

import json

from pv import identity, testdigest
from pv_workspace import cli, falsifier, make_workspace

HONEST = "val_loss < 0.7 * ln(vocab_size)"  # the check observes val_loss 9.0 here: FAIL


# The demo contract: 001 FAILs (the check observes val_loss 9.0), 002 PASSes.
DEMO = [falsifier("FALSIFY-DEMO-001", prediction=HONEST, params={"loss": 9.0}, ship_blocking=True),
        falsifier("FALSIFY-DEMO-002", prediction=HONEST)]


# A third falsifier of the same check (the same template), and one calling a check no other
# falsifier of the contract calls (a template new to the module).
THIRD = falsifier("FALSIFY-DEMO-003", prediction=HONEST, params={"loss": 0.5})  # the same check: the same template
NEW_CHECK = falsifier("FALSIFY-DEMO-004", check="basic:boom", prediction="x < 1")


def demo_workspace(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path, mutants=False)
    ws.add_contract("demo", DEMO)
    ws.generate()
    return ws.enter(monkeypatch)


def status_of(ws, fid: str) -> dict:
    result = cli("status")("--format", "json")
    data = json.loads(result.stdout)  # (warnings, e.g. of a removed falsifier's records, go to stderr)
    return next(f for c in data["contracts"] for f in c["falsifiers"] if f["id"] == fid)


def regenerate(ws, falsifiers: list) -> None:
    ws.add_contract("demo", falsifiers)
    ws.generate()
    assert cli("generate")("--check").exit_code == 0


def as_test3(ws, record, source: str):
    """`record` as pv wrote it before "test4": the "test3" digest of `source`, no templates."""
    from pv.codegen import function_name

    return record.model_copy(update={"test_templates": None,
                                     "test_sha256": identity.test_sha256(source, function_name(record.falsifier))})


def keep_only(ws, records) -> None:
    from pv.ledger import append

    ws.ledger.write_text("")
    append(ws.ledger, records)


def defined_test3_digest(text: str, function: str, add_empty_type_params: bool = False) -> str | None:
    """The "test3" digest from testdigest._test3_parts, the definition of what it covers."""
    import ast
    import hashlib

    from pv.codebind import _canonical

    parts = testdigest._test3_parts(text, function)
    if parts is None:
        return None
    whole, templates = parts
    if add_empty_type_params:
        for node in [*ast.walk(whole), *(n for t in templates for n in ast.walk(t))]:
            if isinstance(node, ast.FunctionDef):
                node.type_params = []  # what 3.12 adds
    text = _canonical(whole) + "templates=[" + "".join(sorted({_canonical(t) for t in templates})) + "]"
    return hashlib.sha256(("test3:" + text).encode()).hexdigest()


def defined_test4(text: str, function: str) -> tuple[str, list[str]] | tuple[None, None]:
    """(the "test4" digest, the template digests) from testdigest._test4_parts, the definition."""
    import hashlib

    from pv.codebind import _canonical

    parts = testdigest._test4_parts(text, function)
    if parts is None:
        return None, None
    whole, templates = parts
    digest = hashlib.sha256(("test4:" + _canonical(whole)).encode()).hexdigest()
    return digest, sorted({hashlib.sha256(("template:" + _canonical(t)).encode()).hexdigest() for t in templates})
