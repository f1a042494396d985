"""What ran is the contract's: the identity of a falsifier test and the definition it judged.

A ledger record says which falsifier it is evidence for (`falsifier_sha256`), but that hash is
what the test's marker *declares*. A generated test edited to judge a weaker prediction, or a
test file elsewhere carrying pv's marker, declares the contract's hash all the same. So a record
also carries what actually ran:

    test_node         `<path from the workspace root>::<pytest name>` of the test that ran
    test_sha256       the "test4" digest (pv.testdigest.test4_sha256) of that test in the module
                      as collected (read before pytest imported it, so a module cannot rewrite
                      itself to hide)
    test_templates    the sorted digests of the distinct templates of the module's test
                      functions as collected (pv.testdigest.template_digests)
    judged_params     the params the harness called the check with (pv.harness.falsify)
    judged_tolerance  the tolerance numbers it passed (the override, without `source`)
    prediction        (an older field) the prediction the harness judged

`EvidenceCheck.refuses(record, falsifier)` says why a record does not count as evidence for the
falsifier's current definition: its test is not the module `pv generate` renders from the
current contract (rendered here from the contract, never imported), or the harness judged
something other than the contract's prediction, params or tolerance, or a record under a
planted bug whose code binding does not hold that bug's `@mutant` function (mutant_not_run: an
honest kill relabelled to another bug). Records made before pv recorded these fields cannot show
it, so they never count (STALE).

The digests are of the module's syntax tree with what cannot change a verdict left out:
comments, docstrings, `if_fails=` and a tolerance's `source` text, the contract version
(promotion bumps it) and the device and subject lists (a PASS on cpu stays one when cuda is
added). "test4" covers the module's statements other than test functions (the imports,
`PV_FALSIFIER = ...`, a helper or a function pytest calls itself, `setup_function`, anything
added) and the falsifier's own test, whole and in order. The module's test functions count as
*templates* (a test's code with its literals blanked and its `test_...` name left out).

The subset rule: a "test4" record counts when its digest is the one of the falsifier's test as
rendered now AND every template that ran (`test_templates`) is a template of the module rendered
now. The other tests count at all because they run in the same pytest session: code added to
one of them (a body that patches the runtime or the harness) could change this falsifier's
verdict, so a record that ran beside a test whose code pv does not render now (hand-edited, or
a falsifier since removed whose template no other test has) is refused ("a sibling test that
ran is not rendered from the current contract"). They count only as a subset because a
falsifier added to the contract since did not run with the record and cannot have changed its
verdict, whatever check it calls: the other falsifiers' records keep counting, and only the new
falsifier's cells are owed. Its own test (a new bound, params, tolerance, check) and the
module's other statements stay protected whole.

Records without `test_templates` were made before "test4" and are judged exactly as before:
they carry the "test3" digest (pv.testdigest.test_sha256: the same statements, and the module's
test functions as the set of their distinct templates, so a falsifier added with a new check
changed every other falsifier's digest), or "test2" (test2_sha256: every other test function by
its shape in its place and with its name), or `ast.dump`'s (legacy_test_sha256). `refuses`
accepts those when they are the digest of the module rendered now, so each such record counts
exactly when it counted before; pv's plugin writes "test4" and `test_templates` (ran_test).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from pv.codebind import in_packages as _within
from pv.ledger import LedgerRecord, _sanitize
from pv.testdigest import legacy_test_sha256, template_digests, test2_sha256, test4_sha256, test_sha256

__all__ = ["EvidenceCheck", "NO_IDENTITY", "RENDERS_OTHER", "SIBLING_OTHER", "cells_option", "defined_texts",
           "judged_differs", "mutant_not_run", "table_differs", "node_differs", "verdict_contradicts", "legacy_test_sha256", "ran_test", "template_digests", "test2_sha256", "test4_sha256",
           "test_sha256", "tolerance_numbers"]

NO_IDENTITY = "recorded before pv recorded what ran (no test identity)"
RENDERS_OTHER = "the test that ran is not what `pv generate` renders from the current contract"
SIBLING_OTHER = "a sibling test that ran is not rendered from the current contract"
PLANTED_IN_CHECKS = "the bug is planted in check code only"


def tolerance_numbers(tolerance: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A tolerance override as the harness received it, without its prose (`source`) and unset
    dtypes: what the definition hash covers."""
    if tolerance is None:
        return None
    if not isinstance(tolerance, Mapping):
        return {"?": repr(tolerance)}
    return {str(k): v for k, v in tolerance.items() if k != "source" and v is not None}


def _canonical(value: Any) -> str:
    return json.dumps(_sanitize(value), sort_keys=True, separators=(",", ":"), default=repr)


def defined_texts(falsifier: Any) -> tuple[str, str, str]:
    """The canonical texts of what the falsifier defines for the harness to judge: its
    prediction, its params and its tolerance numbers (judged_differs compares a record's to them)."""
    tolerance = None
    if falsifier.tolerance is not None:
        tolerance = tolerance_numbers(falsifier.tolerance.model_dump(mode="json"))
    return _canonical(falsifier.prediction), _canonical(falsifier.params), _canonical(tolerance or None)


def judged_differs(record: LedgerRecord, falsifier: Any, defined: tuple[str, str, str] | None = None) -> str | None:
    """Why what the harness judged is not the falsifier's current definition (None: it is).
    A PASS or FAIL always comes from the harness judging; one that does not say what it judged
    cannot show it judged the contract's prediction. `defined`: defined_texts(falsifier), where
    the caller keeps them (EvidenceCheck judges hundreds of records of one falsifier)."""
    if record.judged_params is None:
        if record.verdict.value in ("PASS", "FAIL"):
            return "the record does not say what the harness judged"
        return None  # an ERROR or SKIP before the check ran: the test identity is what binds it
    if defined is None:
        defined = defined_texts(falsifier)
    differs = [name for name, ran, text in zip(
        ("prediction", "params", "tolerance"),
        (record.prediction, record.judged_params, record.judged_tolerance or None), defined,
    ) if _canonical(ran) != text]
    if differs:
        return f"the harness judged another {' and '.join(differs)} than the contract's"
    return table_differs(record, falsifier)


def table_differs(record: LedgerRecord, falsifier: Any) -> str | None:
    """Why the whole tolerance table the check received (`tolerance_table`: pv's per-dtype
    defaults merged with the override) is not the one pv gives it now (None: it is, or the record
    does not say). The override is part of the definition; the defaults are too: a run made with
    pv's table widened (pv/tolerance.py edited, then put back) judged a looser bound than the
    contract's, and its record must not count for the table of today."""
    if record.tolerance_table is None:
        return None
    from pv import tolerance as tolerances

    try:
        now = tolerances.merged(falsifier.tolerance)
    except tolerances.ToleranceError:
        now = None
    if _canonical(record.tolerance_table) == _canonical(now):
        return None
    return ("the check received another tolerance table than pv gives it now (pv's default tolerances "
            "changed since the run?)")


# How pv.ledger._sanitize keeps a non-finite observation (JSON has none): read back as the float.
_NON_FINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def verdict_contradicts(record: LedgerRecord) -> str | None:
    """Why a PASS or FAIL record's own observations contradict its verdict (None: they do not, or
    they cannot be judged again). The harness decides PASS or FAIL by judging the prediction on
    the observations it records, so judging the recorded prediction on them again gives the same
    answer; a record whose verdict was edited (a FAIL made a PASS, a survivor made a kill) does
    not. The recorded observations are a lossy copy (NaN kept as text, long text cut), so only a
    definite contradiction counts: where the prediction cannot be judged again, None."""
    if record.verdict.value not in ("PASS", "FAIL"):
        return None
    from pv import expr

    observations = dict(record.observations)
    try:
        try:
            holds = expr.judge(record.prediction, observations).holds
        except (expr.EvalError, TypeError, ArithmeticError):
            restored = {k: _NON_FINITE.get(v, v) if isinstance(v, str) else v for k, v in observations.items()}
            holds = expr.judge(record.prediction, restored).holds
    except (expr.ExprError, expr.EvalError, TypeError, ArithmeticError, RecursionError):
        return None
    if holds == (record.verdict.value == "PASS"):
        return None
    return (f"its recorded observations contradict its verdict {record.verdict.value}: judged again, the "
            f"prediction {'holds' if holds else 'is false'} (the verdict was edited after the run?)")


def executed_code_cut(record: LedgerRecord, falsifier: Any) -> str | None:
    """Why a PASS or FAIL record bound to the units it executed cannot be the whole of what its
    run executed (None: it can be, or it cannot show it). The harness calls the check, so the
    check's own unit is among what ran; and a module is listed because its code ran, after its
    module-level code ran at import, which is bound too (pv.execution). A record without either
    was cut down after the run, e.g. the entry of a module edited since emptied so that no digest
    is left to compare and it looks fresh. (Deleting a whole module the check does not define
    cannot be told from a run that never reached it: that would need signed records.)"""
    if record.verdict.value not in ("PASS", "FAIL") or not isinstance(record.executed_code, dict) \
            or record.binding == "modules":
        return None
    from pv.codeunits import MODULE_UNIT

    cut = sorted(module for module, units in record.executed_code.items() if MODULE_UNIT not in units)
    if cut:
        return (f"its executed code lists {', '.join(cut)} without the module-level code every module that "
                "ran executed (the record was cut down after the run?)")
    check = getattr(falsifier, "check", None)
    if check and ":" in check:
        qualname = check.split(":", 1)[1]
        # under the module that defines it, which is not the one the check names where that
        # module re-exports it (`from .impl import loss`)
        if not any(qualname in units for units in record.executed_code.values()):
            return (f"its executed code does not include its own check {check}, which every run calls (the "
                    "record was cut down after the run?)")
    return None


def runtime_not_driven(record: LedgerRecord, falsifier: Any, workspace: Any) -> str | None:
    """Why a PASS of a falsifier that drives a runtime through its adapter (`runtimes:`) is no
    evidence about the code under test (None: it is, or it cannot be told). The adapter is code
    pv does not control: one that answers with a model of its own or the oracle's formula passes
    whatever the runtime does. Its run then executed no function of `[tool.pv] code_packages`
    outside the check packages (the adapter lives in a check package, `pv init`'s layout) — at
    most their module-level code, run at import. Where the project names no such package, or the
    record binds whole modules (timing), nothing is judged."""
    if record.verdict.value != "PASS" or record.mutant is not None or record.binding == "modules" \
            or not isinstance(record.executed_code, dict):
        return None
    if not (record.runtime or getattr(falsifier, "runtimes", None)):
        return None
    checks = tuple(getattr(workspace, "check_packages", ()) or ())
    under_test = [p for p in (getattr(workspace, "code_packages", ()) or ()) if not _within(p, checks)]
    if not under_test:
        return None
    from pv.codeunits import MODULE_UNIT

    if any(_within(module, under_test) and not _within(module, checks) and set(units) - {MODULE_UNIT}
           for module, units in record.executed_code.items()):
        return None
    return (f"it drove no code under test: its run through runtime {record.runtime or '(default)'!r} executed no "
            f"function of {', '.join(under_test)} (code_packages), at most their module-level code — an "
            "adapter that answers without the runtime (a model of its own, the oracle's formula) passes "
            "whatever the runtime does")


def runtime_rebound(record: LedgerRecord, workspace: Any) -> str | None:
    """Why a record that ran through a runtime's adapter is not evidence for the runtime of that
    name now (None: it is, or it cannot be told): `[tool.pv] runtimes` binds the name to another
    adapter since. The records made through the old one (its module unchanged, so fresh by code)
    would otherwise keep the cells of the new one discharged — pointing `transformers` at the
    Liger adapter changed nothing on this repository's dashboard. Records made before records
    carried their binding (schema 10) are not judged."""
    if not record.runtime or not record.runtime_binding:
        return None
    now = (getattr(workspace, "runtimes", None) or {}).get(record.runtime)
    if now is None or now == record.runtime_binding:
        return None
    return (f"it ran through {record.runtime_binding}; [tool.pv] runtimes binds runtime {record.runtime!r} to "
            f"{now} now")


def planted_in_checks(record: LedgerRecord, falsifier: Any, workspace: Any) -> str | None:
    """Why a FAIL under a planted bug is no kill (None: it is one, or it cannot be told): the
    falsifier drives a runtime through its adapter (`runtimes:`), and entering the bug replaced
    code of the check packages only — the adapter or the check, the instrument — and nothing of the
    code under test. An adapter that bypasses its runtime kills such bugs and no bug of the
    runtime. Not judged: falsifiers without `runtimes:` (`pv init`'s demo keeps the code it
    checks in the check package), projects whose `code_packages` name nothing outside the check
    packages (the runtime is a library outside the workspace, e.g. transformers, and the adapter
    is its only seam there), seams outside the bound packages (torch), and records made before
    pv recorded seams (`planted_at` None)."""
    if record.mutant is None or record.verdict.value != "FAIL":
        return None
    return seams_in_checks_only(record.planted_at, record.runtime, falsifier, workspace)


def seams_in_checks_only(planted_at: Any, runtime: str | None, falsifier: Any, workspace: Any) -> str | None:
    """planted_in_checks' rule on the fields it reads (a FAIL under a bug, run through `runtime`,
    whose entering changed `planted_at`): `pv strength` applies it to a live outcome before it
    counts the kill, pv status to the record."""
    if not planted_at:
        return None
    if not (runtime or getattr(falsifier, "runtimes", None)):
        return None
    checks = tuple(getattr(workspace, "check_packages", ()) or ())
    if not any(not _within(p, checks) for p in (getattr(workspace, "code_packages", ()) or ())):
        return None
    own = getattr(workspace, "mutants_module", None)
    seams = [s for s in planted_at if isinstance(s, str)
             and not (own and _within(s.split(":", 1)[0], (own,)))]   # the bug's own bookkeeping
    if not seams or not all(_within(s.split(":", 1)[0], checks) for s in seams):
        return None
    shown = ", ".join(seams[:3]) + (f" and {len(seams) - 3} more" if len(seams) > 3 else "")
    return (f"{PLANTED_IN_CHECKS} ({shown}: check_packages), not in the code under test — "
            "a FAIL under it shows the check sees its own instrument broken, not the runtime")


def node_differs(record: LedgerRecord, prefix: str) -> str | None:
    """Why the parameters in the record's test node (`...::test_x[cpu-tiny-trained-pvlab]`, device
    first, then subject, then runtime: pv.codegen.test_name) are not the record's own `device`,
    `subject` and `runtime` (None: they are). pytest named the test from the cell it ran, so a
    record whose `device` says cuda while its node says `[cpu]` was relabelled after the run.
    `prefix`: the node prefix the record matched (`<module>::<function>`)."""
    from pv.subjects import is_path_subject

    node = record.test_node or ""
    ran = node[len(prefix):]
    parts = [record.device, *(p for p in (record.subject, record.runtime) if p is not None)]
    expected = f"[{'-'.join(parts)}]"
    if ran == expected or (is_path_subject(record.subject) and ran.startswith(f"[{record.device}-")):
        return None  # (pytest may spell a path subject's directory its own way in the id)
    return (f"its test node {node} did not run the cell it names (device {record.device!r}"
            + (f", subject {record.subject!r}" if record.subject is not None else "")
            + (f", runtime {record.runtime!r}" if record.runtime is not None else "")
            + f": the node would end {expected})")


def mutant_not_run(record: LedgerRecord, defined: tuple[str, str | None] | None, registry: bool = True) -> str | None:
    """Why the code a record is bound to cannot have planted its bug (None: it can, or the record
    cannot show it). `defined`: (module, qualname) of the bug's `@mutant` function
    (pv.staticcheck.ModuleIndex.mutant_defs; None: a name the mutants module does not declare).
    Planting a bug runs its function, so a traced record under it executed that unit, and a
    record bound to the modules it can run (`binding: modules`, pv.timing: every unit of the
    bug's module; or code_digests on a record made before units) bound its module. An honest record made under another bug and copied
    with this bug's name did neither. A record with no code binding cannot show it. A bug the
    mutants module does not declare (PV309) was planted by nothing there is to compare with: an
    honest kill copied under such a name would otherwise count, so no record under it does.
    `registry`: the project names a mutants module ([tool.pv] mutants_module); without one pv
    plants no bug and judges no record's bug (as pv.lifecycle.mutant_meets)."""
    if record.mutant is None or (defined is None and not registry):
        return None
    if defined is None:
        return (f"bug {record.mutant!r} is not declared in the mutants module ([tool.pv] mutants_module), so "
                "nothing shows it was planted (the record relabelled after the run?)")
    module, qualname = defined
    if record.executed_code is not None:
        if qualname is None or qualname in record.executed_code.get(module, {}):
            return None
        ran = f"{module}:{qualname}"
    elif record.code_digests is not None:
        if module in record.code_digests:
            return None
        ran = module
    else:
        return None
    return (f"the code of bug {record.mutant!r} ({ran}) did not run in it: it was made under another "
            f"bug or none (the record relabelled after the run?)")


class EvidenceCheck:
    """Whether a record's code is the tree's (`changes`, pv.codebind.TreeDigests) and whether
    the record ran the contract's generated test on the contract's definition (`refuses`).
    pv.lifecycle takes it as its `code` argument."""

    def __init__(self, workspace: Any, loaded: list[Any], tree: Any = None, modules: Any = None):
        """`modules`: the pv.staticcheck.ModuleIndex that reads the mutants module (a caller
        judging many contracts in one run shares one; by default a fresh one)."""
        from pv.codebind import TreeDigests

        self.workspace = workspace
        self.tree = TreeDigests(workspace.root) if tree is None else tree
        self._modules = modules
        self._loaded = {lc.contract.metadata.id: lc for lc in loaded if getattr(lc, "contract", None) is not None}
        self._rendered: dict[str, str | None] = {}
        self._expected: dict[tuple[str, str], tuple[str, str | None] | None] = {}
        # (contract, falsifier, the record's Python; None: "test2") -> the digest an older record carries
        self._older_digests: dict[tuple[str, str, str | None], str | None] = {}
        # (contract, falsifier) -> ("test4" digest, the module's template digests) rendered now
        self._test4: dict[tuple[str, str], tuple[str | None, frozenset[str]]] = {}
        self._planted: dict[str, tuple[str, ...] | None] | None = None  # mutant -> its `runtimes=`
        self._mutant_defs: dict[str, tuple[str, str | None]] = {}  # mutant -> (module, qualname)
        # id of a falsifier -> (the falsifier, kept so that its id stays its own; its defined_texts)
        self._defined: dict[int, tuple[Any, tuple[str, str, str]]] = {}

    def changes(self, recorded: Mapping[str, str] | None) -> tuple[str, ...]:
        return self.tree.changes(recorded)

    def record_changes(self, record: LedgerRecord) -> tuple[str, ...]:
        return self.tree.record_changes(record)

    def mutant_meets(self, mutant: str, runtime: str | None) -> bool:
        """Whether the bug `mutant` is planted in `runtime`, a falsifier cell's (pv.mutation.meets;
        read from the mutants module without importing it). A name the module does not declare
        is judged by no runtime (pv validate reports it, PV309)."""
        from pv import mutation

        self._scan_mutants()
        if mutant not in self._planted:
            return True
        table = self.workspace.runtimes
        return mutation.meets(mutation.planted_in(self._planted[mutant], table), runtime, table)

    def _scan_mutants(self) -> None:
        if self._planted is None:  # read as pv validate reads it (pv.cache keeps it by the files' bytes)
            from pv.staticcheck import ModuleIndex

            module = self.workspace.mutants_module
            index = self._modules if self._modules is not None else ModuleIndex(self.workspace.root)
            found = index.mutant_runtimes(module) if module else None
            self._planted = {name: runtimes for name, (runtimes, _) in (found or {}).items()}
            self._mutant_defs = index.mutant_defs(module) if module else {}

    def __getattr__(self, name: str) -> Any:  # anything else the tree's digests answer
        if name == "tree":
            raise AttributeError(name)
        return getattr(self.tree, name)

    def _render(self, contract_id: str) -> str | None:
        if contract_id not in self._rendered:
            from pv import codegen

            loaded = self._loaded.get(contract_id)
            try:
                self._rendered[contract_id] = None if loaded is None else codegen.render(loaded, self.workspace)
            except Exception:  # noqa: BLE001 - a contract pv cannot render has no generated test to match
                self._rendered[contract_id] = None
        return self._rendered[contract_id]

    def expected(self, contract_id: str, falsifier_id: str) -> tuple[str, str | None] | None:
        """(node prefix `<generated module>::<function>`, test digest) of the falsifier's generated
        test as `pv generate` renders it now; None when the contract is unknown here."""
        key = (contract_id, falsifier_id)
        if key not in self._expected:
            from pv.codegen import function_name, module_name

            text = self._render(contract_id)
            if text is None:
                self._expected[key] = None
            else:
                function = function_name(falsifier_id)
                module = self.workspace.rel(self.workspace.generated_dir / module_name(contract_id))
                self._expected[key] = (f"{module}::{function}", test_sha256(text, function))
        return self._expected[key]

    def current(self, contract_id: str, falsifier_id: str) -> tuple[str | None, frozenset[str]]:
        """("test4" digest, the digests of the module's test templates) of the falsifier's
        generated test as `pv generate` renders it now ((None, empty) when it cannot be rendered)."""
        key = (contract_id, falsifier_id)
        if key not in self._test4:
            from pv.codegen import function_name

            text = self._render(contract_id)
            function = function_name(falsifier_id)
            self._test4[key] = ((None, frozenset()) if text is None else
                                (test4_sha256(text, function), frozenset(template_digests(text) or ())))
        return self._test4[key]

    def _older(self, record: LedgerRecord, falsifier_id: str, test2: bool) -> str | None:
        """The digest a record made before "test3" digests carries if it ran the current generated
        test: its "test2" digest (`test2`), or, older still, ast.dump's as the record's Python
        computed it. Asked only of a record whose digest is not the current one."""
        python = (record.versions or {}).get("python")
        key = (record.contract, falsifier_id, None if test2 else str(python))
        if key not in self._older_digests:
            from pv.codegen import function_name

            text = self._render(record.contract)
            function = function_name(falsifier_id)
            self._older_digests[key] = (None if text is None else test2_sha256(text, function) if test2
                                        else legacy_test_sha256(text, function, python))
        return self._older_digests[key]

    def refuses(self, record: LedgerRecord, falsifier: Any) -> str | None:
        """Why `record` is not evidence for `falsifier`'s current definition (None: it is)."""
        if record.test_sha256 is None or record.test_node is None:
            return NO_IDENTITY
        expected = self.expected(record.contract, falsifier.id)
        if expected is None:
            return "the contract's generated test cannot be rendered to compare with"
        prefix, digest = expected
        node = record.test_node
        if not (node == prefix or node.startswith(prefix + "[")):
            return f"not run by the contract's generated test ({node} ran, not {prefix})"
        differs = node_differs(record, prefix)
        if differs is not None:
            return differs
        if record.test_templates is not None:  # "test4": its own test whole, its siblings a subset
            own, templates = self.current(record.contract, falsifier.id)
            if record.test_sha256 != own:
                return RENDERS_OTHER
            if not templates.issuperset(record.test_templates):
                return SIBLING_OTHER
        # Records made before "test4" carry an older digest of the same test: "test3", else older
        # still (computed only when "test3" differs)
        elif (record.test_sha256 != digest and record.test_sha256 != self._older(record, falsifier.id, test2=True)
                and record.test_sha256 != self._older(record, falsifier.id, test2=False)):
            return RENDERS_OTHER
        if id(falsifier) not in self._defined:
            self._defined[id(falsifier)] = (falsifier, defined_texts(falsifier))
        why = (judged_differs(record, falsifier, self._defined[id(falsifier)][1]) or verdict_contradicts(record)
               or executed_code_cut(record, falsifier) or runtime_not_driven(record, falsifier, self.workspace)
               or runtime_rebound(record, self.workspace))
        if why is None and record.mutant is not None:
            self._scan_mutants()
            why = (mutant_not_run(record, self._mutant_defs.get(record.mutant), bool(self.workspace.mutants_module))
                   or planted_in_checks(record, falsifier, self.workspace))
        return why


def ran_test(workspace: Any, path: Path, name: str, function: str, contract: str | None, falsifier: str | None,
             source: str | None) -> tuple[str | None, str | None, list[str] | None, str | None]:
    """(test_node, test_sha256 ("test4"), test_templates, why it is not recorded) for a
    falsifier test pytest ran from `path` (`name`: its pytest name; `function`: its function;
    `source`: the file as collected, None if pv's plugin did not see it collected). Only the
    generated module of the marker's contract, and the function of the marker's falsifier, may
    record evidence."""
    from pv.codegen import function_name, module_name

    node = f"{workspace.rel(path)}::{name}"
    if contract is None or falsifier is None:
        return node, None, None, "its marker names no contract or falsifier"
    try:
        expected_path = workspace.generated_dir / module_name(contract)
        expected_function = function_name(falsifier)
    except ValueError:
        return node, None, None, "its marker names no valid contract or falsifier"
    try:
        same_file = Path(path).resolve() == expected_path.resolve()
    except (OSError, RuntimeError):
        same_file = False
    if not same_file:
        return node, None, None, (f"{workspace.rel(path)} is not the generated test module of contract "
                                  f"{contract} ({workspace.rel(expected_path)})")
    if function != expected_function:
        return node, None, None, f"{function} is not the generated test of {falsifier} ({expected_function})"
    if source is None:
        return node, None, None, "pv's plugin did not see the module collected, so cannot digest what ran"
    digest = test4_sha256(source, function)
    if digest is None:
        return node, None, None, "the module that ran has no such test function"
    return node, digest, template_digests(source), None


def cells_option(selected: Any) -> str:
    """`--pv-cells` for pv's plugin: the (contract, falsifier, device, subject) cells `pv run`
    selected, so that no other test's outcome is recorded (extra paths given after `--`)."""
    return json.dumps(sorted({(s.contract, s.falsifier, s.device, s.subject) for s in selected},
                             key=lambda cell: tuple("" if part is None else part for part in cell)))


def unrendered_modules(workspace: object, sources: Mapping[str, str]) -> list[str]:
    """Binding problems for the generated test modules of this session (`sources`: path -> text as
    collected) that are not what `pv generate` renders from their contract now. Every module
    collected is imported, so a hand edit to another contract's module (a patch at its top) runs
    beside this falsifier's test; pv.identity judges only the falsifier's own module, and
    `session_code` (pv.sessionbind) leaves the generated modules out (a sibling contract's honest edit must not
    stale this record), so such a module is judged here, as it ran: a record made beside one is
    never fresh. `pv run` regenerates first, so only a plain pytest run can meet one."""
    from pv.codegen import HEADER_PREFIX, module_name, render
    from pv.loader import load_contract

    generated = os.path.realpath(workspace.generated_dir)  # type: ignore[attr-defined]
    problems = []
    for path, text in sorted(sources.items()):
        real = os.path.realpath(path)
        if os.path.dirname(real) != generated:
            continue  # elsewhere: a workspace module like any other (session_code), recording nothing
        name = os.path.basename(real)
        first = text.split("\n", 1)[0]
        contract = first[len(HEADER_PREFIX):].split(" — ", 1)[0] if first.startswith(HEADER_PREFIX) else ""
        rendered = None
        try:
            loaded, _ = load_contract(workspace.root / contract, contract)  # type: ignore[attr-defined]
            if contract and loaded is not None and loaded.contract is not None \
                    and module_name(loaded.contract.metadata.id) == name:
                rendered = render(loaded, workspace)
        except Exception:  # noqa: BLE001 - a module pv cannot render from its contract is not pv's
            rendered = None
        if rendered != text:
            problems.append(f"{workspace.rel(Path(real))} ran in the session but is not what `pv generate` renders "  # type: ignore[attr-defined]
                            "from its contract (edited by hand?)")
    return problems
