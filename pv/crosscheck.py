"""Checks beyond the schema: what one file cannot say about itself.

Per file (`check_file`): the schema comment on the first line, the file name, obligation ->
falsifier references, the expression language (predictions; formulas are prose), `check:` bindings
(verified statically, see pv.staticcheck), unbound falsifiers, and mutant names.
Across the contracts dir (`check_all`): ids unique (contract, falsifier and obligation ids),
`depends_on` targets exist and form no cycle.

The checks read the plain YAML data (not the pydantic model), guarding every type, so a
contract that the schema rejects still gets its other problems reported in the same run.
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from pv import expr, tolerance as tolerances, vacuity
from pv import keypaths as K
from pv.config import Workspace
from pv.diagnostics import Diagnostic, Severity, did_you_mean, internal_error
from pv.safe_yaml import SCHEMA_LINE_PREFIX, LoadedContract
from pv.schema import CHECK_PATTERN, PROJECT_SCHEMA, LifecycleStatus, schema_reference
from pv.staticcheck import ModuleIndex, Unresolved, in_allowed_package

UNBOUND_IS_ERROR_EVERYWHERE = False
"""The single switch for PV308. False: a falsifier without `check:` is a warning while the
contract's metadata.status is DRAFT and an error above DRAFT. True: an error at every status
(`pv validate --strict-bindings` turns it on for one run)."""

_CHECK_RE = re.compile(CHECK_PATTERN)
# "did you mean" among contract ids, falsifier ids, runtime and mutant names: a stricter
# similarity than for schema keys (pv.diagnostics.did_you_mean's default 0.7), as it always was
NEAR_CUTOFF = 0.75


@dataclass
class Context:
    workspace: Workspace
    index: ModuleIndex = field(init=False)
    strict_bindings: bool = UNBOUND_IS_ERROR_EVERYWHERE

    def __post_init__(self) -> None:
        self.index = ModuleIndex(self.workspace.root, autosave=False)  # saved by the run (pv.validation)
        from pv.cache import Cache, installed_version, pv_source_digest

        # What the file-local checks found, per file text (see _file_local); the vacuity check
        # among them may ask z3, so its version is part of what decided them.
        self.file_facts = Cache(self.workspace.root, "file-checks",
                                lambda: f"{pv_source_digest()}|z3-solver={installed_version('z3-solver')}")
        # The YAML of each contract, per file bytes (pv.loadcache).
        from pv.loadcache import LOAD_FACTS_VERSION

        self.load_facts = Cache(self.workspace.root, "yaml-data", lambda: f"{pv_source_digest()}|{LOAD_FACTS_VERSION}")


def _d(loaded: LoadedContract, pos: tuple[int, int], code: str, message: str, hint: str = "",
       warning: bool = False) -> Diagnostic:
    return Diagnostic(path=loaded.display_path, line=pos[0], col=pos[1], code=code, message=message,
                      hint=hint, severity=Severity.WARNING if warning else Severity.ERROR)


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _falsifiers(data: Any) -> list[tuple[int, dict]]:
    return [(i, f) for i, f in enumerate(_list(_dict(data).get(K.FALSIFIERS.key))) if isinstance(f, dict)]


def _obligations(data: Any) -> list[tuple[int, dict]]:
    return [(i, o) for i, o in enumerate(_list(_dict(data).get(K.OBLIGATIONS.key))) if isinstance(o, dict)]


# --- per file --------------------------------------------------------------------------------


def check_file(loaded: LoadedContract, ctx: Context) -> list[Diagnostic]:
    """Every per-file check. A check that fails inside pv becomes one PV199 naming it, and the
    other checks of the file still report."""
    if not isinstance(loaded.data, dict):
        return []
    out = _file_local(loaded, ctx)
    out += _guarded(schema_comment, loaded, ctx.workspace.root)
    out += _guarded(bindings, loaded, ctx)
    out += _guarded(mutants, loaded, ctx)
    return out


def _file_local(loaded: LoadedContract, ctx: Context) -> list[Diagnostic]:
    """The checks that read nothing but the file (its name, its text): remembered in pv.cache
    under the text, the path as shown and pv's own source, so an unchanged contract is not
    parsed and analysed again (its expressions are most of a contract's checking)."""
    from pv.cache import key_of

    key = key_of(loaded.text, loaded.display_path, loaded.path.name) if ctx.file_facts.active else ""
    found = ctx.file_facts.get(key) if key else None
    if isinstance(found, list):
        try:
            return [Diagnostic(path=d["path"], line=d["line"], col=d["col"], code=d["code"], message=d["message"],
                               hint=d["hint"], severity=Severity(d["severity"])) for d in found]
        except (KeyError, TypeError, ValueError):
            pass
    out: list[Diagnostic] = []
    for check in (file_name, obligation_references, expressions, tolerance_caps, timing_observations):
        out += _guarded(check, loaded)
    if key and not any(d.code == "PV199" for d in out):  # a bug in pv is reported every time, never remembered
        ctx.file_facts.put(key, [d.to_json() for d in out])
    return out


def _guarded(check: Any, loaded: LoadedContract, *args: Any) -> list[Diagnostic]:
    try:
        return check(loaded, *args)
    except Exception as exc:  # noqa: BLE001 - a bug in one check must not hide the others
        return [internal_error(loaded.display_path, RuntimeError(f"in the {check.__name__} check: "
                                                                 f"{type(exc).__name__}: {exc}"))]


def _schema_hint(directory: Path, root: Path, lead: str) -> str:
    """The first line to write, naming the project's own copy of the schema relatively (a
    path into pv's install would hold on one machine only); says to write the copy first
    when the project has none yet."""
    target = root / PROJECT_SCHEMA
    line = f"{SCHEMA_LINE_PREFIX}{schema_reference(directory, target)}"
    if os.path.isfile(target):
        return f"{lead}: {line}"
    return f"run `pv schema --write` (writes {PROJECT_SCHEMA}), then {lead}: {line}"


_schema_targets: dict[tuple[str, str], bool] = {}


def _schema_exists(directory: str, target: str) -> bool:
    key = (directory, target)
    if key not in _schema_targets:
        _schema_targets[key] = os.path.isfile(os.path.join(directory, target))
    return _schema_targets[key]


def schema_comment(loaded: LoadedContract, root: Path) -> list[Diagnostic]:
    first = loaded.text.split("\n", 1)[0].rstrip("\r")
    directory = os.path.dirname(os.path.abspath(loaded.path))
    if not first.startswith(SCHEMA_LINE_PREFIX):
        return [_d(loaded, (1, 1), "PV207", "first line is not the schema comment; editors cannot check this file",
                   _schema_hint(Path(directory), root, "make the first line"), warning=True)]
    target = first[len(SCHEMA_LINE_PREFIX):].strip()
    if "://" in target:
        return []
    if not target or not _schema_exists(directory, target):
        return [_d(loaded, (1, len(SCHEMA_LINE_PREFIX) + 1), "PV208",
                   f"schema comment names {target or 'nothing'!s}, which does not exist from this file",
                   _schema_hint(Path(directory), root, "use"), warning=True)]
    return []


def file_name(loaded: LoadedContract) -> list[Diagnostic]:
    meta = _dict(loaded.data.get(K.METADATA.key))
    cid, version = meta.get(K.CONTRACT_ID.key), meta.get(K.CONTRACT_VERSION.key)
    if not isinstance(cid, str) or not isinstance(version, str):
        return []
    major = version.split(".", 1)[0]
    if not major.isdigit():
        return []  # the schema reports the version
    expected = f"{cid}-v{int(major)}.yaml"
    if loaded.path.name == expected:
        return []
    return [_d(loaded, loaded.position(K.CONTRACT_ID.at()), "PV304",
               f"file is named {loaded.path.name!r} but metadata.id {cid!r} version {version} wants {expected!r}",
               f"rename the file to {expected} (or fix metadata.id / metadata.version)")]


def obligation_references(loaded: LoadedContract) -> list[Diagnostic]:
    known = {f.get(K.FALSIFIER_ID.key) for _, f in _falsifiers(loaded.data)
             if isinstance(f.get(K.FALSIFIER_ID.key), str)}
    out = []
    for i, ob in _obligations(loaded.data):
        for j, fid in enumerate(_list(ob.get(K.OBLIGATION_FALSIFIERS.key))):
            if isinstance(fid, str) and fid not in known:
                out.append(_d(loaded, loaded.position(K.OBLIGATION_FALSIFIERS.at(i) + (j,)), "PV305",
                              f"obligation {ob.get(K.OBLIGATION_ID.key)!s} names falsifier {fid!r}, which this contract does not define",
                              did_you_mean(fid, sorted(known), "obligations may only name falsifiers of the same contract",
                                           cutoff=NEAR_CUTOFF)))
    return out


def expr_diagnostic(loaded: LoadedContract, loc: tuple, code: str, exc: expr.ExprError, what: str) -> Diagnostic:
    text = loaded.value_at(loc)
    pos = loaded.position(loc)
    if exc.col > 0 and isinstance(text, str):
        joined = " ".join(text.split("\n"))
        lead = len(joined) - len(joined.lstrip())
        pos = loaded.value_position(loc, lead + exc.col - 1)
    return _d(loaded, pos, code, f"{what}: {exc.message}", exc.hint)


def non_ascii_name(loaded: LoadedContract, loc: tuple, what: str) -> Diagnostic | None:
    """PV406 for a prediction or formula that parses but is not ASCII: the only non-ASCII
    text Python's parser accepts there is a name, and it folds names by NFKC (`ｖal_loss` is
    read as `val_loss`), so pv would judge a name other than the one written. Refused."""
    text = loaded.value_at(loc)
    if not isinstance(text, str) or text.isascii():
        return None
    index = next(i for i, ch in enumerate(text) if not ch.isascii())
    word = next((m for m in _WORD.finditer(text) if m.start() <= index < m.end()), None)
    written = word.group() if word else text[index]
    start = word.start() if word else index
    return _d(loaded, loaded.value_position(loc, start), "PV406",
              f"{what}: the name {written!r} is not ASCII (Python would read it as "
              f"{unicodedata.normalize('NFKC', written)!r})",
              "names in pv expressions are ASCII letters, digits and _; retype the name")


_WORD = re.compile(r"\w+")


def expressions(loaded: LoadedContract) -> list[Diagnostic]:
    out = []
    for i, f in _falsifiers(loaded.data):
        text = f.get(K.PREDICTION.key)
        if not isinstance(text, str) or not text.strip():
            continue  # the schema reports missing or non-text predictions
        loc = K.PREDICTION.at(i)
        try:
            parsed = expr.parse(text)
        except expr.ExprError as exc:
            out.append(expr_diagnostic(loaded, loc, "PV401", exc, "prediction"))
            continue
        refused = non_ascii_name(loaded, loc, "prediction")
        if refused is not None:
            out.append(refused)
            continue
        if not expr.is_boolean(parsed):
            out.append(_d(loaded, loaded.position(loc), "PV402",
                          f"prediction {parsed.text!r} is not true/false at the top level",
                          "a prediction compares observations, e.g. `val_loss < 0.7 * ln(vocab_size)`"))
        elif not parsed.names:
            out.append(_d(loaded, loaded.position(loc), "PV404",
                          f"prediction {parsed.text!r} mentions no observation, so it can never fail",
                          "compare an observation the check returns with a bound"))
        elif (decision := vacuity.decide(parsed)).refused:
            out.append(_d(loaded, loaded.position(loc), "PV405",
                          f"prediction {parsed.text!r} cannot fail: {decision.refused}",
                          "a falsifier must be able to fail: bound an observation by an independent value"))
        elif decision.undecided:  # never a silent accept: say which question stayed open
            out.append(_d(loaded, loaded.position(loc), "PV407",
                          f"pv could not decide whether prediction {parsed.text!r} {decision.undecided[:-1]} "
                          "(the solver gave up)",
                          "check by hand that some observation makes it false, or simplify it", warning=True))
    # `equations.formula` is documentation (`‖x‖₂`, `∑`, `≈` welcome): never parsed, never
    # judged. What is checked is the falsifiers' predictions above.
    return out


def tolerance_caps(loaded: LoadedContract) -> list[Diagnostic]:
    """PV408: a tolerance override looser than its dtype's cap (pv.tolerance.CAPS)."""
    out = []
    for i, f in _falsifiers(loaded.data):
        for dtype, name, value in tolerances.caps_exceeded(f.get(K.TOLERANCE.key)):
            out.append(_d(loaded, loaded.position((*K.TOLERANCE.at(i), dtype, name)), "PV408", tolerances.over_cap(dtype, name, value),
                          f"measure the worst case and bound it by a small factor, under {tolerances.CAPS[dtype][name]:g}"))
    return out


def timing_observations(loaded: LoadedContract) -> list[Diagnostic]:
    """PV409: `timing_observations` names an observation the prediction does not read. The
    declaration runs the check untraced (pv.timing); it must name what makes tracing wrong."""
    out = []
    for i, f in _falsifiers(loaded.data):
        declared, text = f.get(K.TIMING_OBSERVATIONS.key), f.get(K.PREDICTION.key)
        if not isinstance(declared, list) or not isinstance(text, str):
            continue  # the schema reports the wrong types
        try:
            read = expr.parse(text).names
        except expr.ExprError:
            continue  # PV401 reports it
        for j, name in enumerate(declared):
            if isinstance(name, str) and name not in read:
                out.append(_d(loaded, loaded.position((*K.TIMING_OBSERVATIONS.at(i), j)), "PV409",
                              f"timing_observations names {name!r}, which the prediction does not read",
                              f"list only the timed observations of the prediction ({', '.join(sorted(read))}); "
                              "a falsifier that times nothing runs traced, bound to the functions it executed"))
    return out


def _status(loaded: LoadedContract) -> LifecycleStatus | None:
    raw = _dict(loaded.data.get(K.METADATA.key)).get(K.STATUS.key)
    try:
        return LifecycleStatus(raw)
    except ValueError:
        return None


HARNESS_KEYWORDS = ("device", "tolerance")  # what the harness passes a check itself


def binding_placement(loaded: LoadedContract, i: int, packages: tuple[str, ...] | list[str]) -> list[Diagnostic]:
    """What can be said of falsifier `i`'s binding without reading its module: PV310 (the
    check lies outside the allowed packages; nothing more is checked) or PV316 (params sets
    what the harness passes). `pv generate` refuses on these too."""
    f = _dict(_list(_dict(loaded.data).get(K.FALSIFIERS.key))[i])
    check = f.get(K.CHECK.key)
    loc = K.CHECK.at(i)
    if isinstance(check, str) and _CHECK_RE.match(check) and not in_allowed_package(check.split(":")[0], packages):
        return [_d(loaded, loaded.position(loc), "PV310",
                   f"check {check!r} is outside the allowed packages ({', '.join(packages)})",
                   "checks live in the packages named by [tool.pv] check_packages")]
    params = _dict(f.get(K.PARAMS.key))
    return [_d(loaded, loaded.position(K.PARAMS.at(i) + (key,), key=True), "PV316",
               f"params must not set {key!r}: the harness passes it",
               "devices come from `devices:`, tolerances from `tolerance:`")
            for key in params if key in HARNESS_KEYWORDS]


def subject_placement(loaded: LoadedContract, i: int, subject_param: str) -> list[Diagnostic]:
    """PV318: a falsifier with `subjects:` also sets the parameter its subjects fill. Which of
    the two would the check get? `pv generate` refuses on it too."""
    f = _dict(_list(_dict(loaded.data).get(K.FALSIFIERS.key))[i])
    if not f.get(K.SUBJECTS.key) or subject_param not in _dict(f.get(K.PARAMS.key)):
        return []
    return [_d(loaded, loaded.position(K.PARAMS.at(i) + (subject_param,), key=True), "PV318",
               f"params sets {subject_param!r}, which this falsifier's `subjects:` fill "
               f"([tool.pv] subject_param = {subject_param!r})",
               f"drop {subject_param!r} from params and list its value under `subjects:`")]


def runtime_names(loaded: LoadedContract, i: int, known: dict[str, str]) -> list[Diagnostic]:
    """PV319: a falsifier's `runtimes:` names a runtime [tool.pv] runtimes does not."""
    f = _dict(_list(_dict(loaded.data).get(K.FALSIFIERS.key))[i])
    out = []
    for k, name in enumerate(_list(f.get(K.RUNTIMES.key))):
        if isinstance(name, str) and name not in known:
            out.append(_d(loaded, loaded.position(K.RUNTIMES.at(i) + (k,)), "PV319",
                          f"runtime {name!r} is not one of [tool.pv] runtimes ({', '.join(known) or 'none'})",
                          did_you_mean(name, list(known),
                                       "name it in [tool.pv] runtimes = {NAME = \"module:factory\"} (docs/adopting.md)",
                                       cutoff=NEAR_CUTOFF)))
    return out


def bindings(loaded: LoadedContract, ctx: Context) -> list[Diagnostic]:
    out = []
    status = _status(loaded)
    unbound_is_error = ctx.strict_bindings or (status is not None and status is not LifecycleStatus.DRAFT)
    packages = ctx.workspace.check_packages
    for i, f in _falsifiers(loaded.data):
        fid = f.get(K.FALSIFIER_ID.key)
        fid = fid if isinstance(fid, str) else f"{K.FALSIFIERS}[{i}]"
        out += subject_placement(loaded, i, ctx.workspace.subject_param)
        out += runtime_names(loaded, i, ctx.workspace.runtimes)
        check = f.get(K.CHECK.key)
        if check is None:
            where = "" if unbound_is_error else " (a warning while the contract is DRAFT)"
            out.append(_d(loaded, loaded.position(K.FALSIFIER_ID.at(i)), "PV308",
                          f"falsifier {fid} has no `check:`, so nothing can run it{where}",
                          "bind it to a check: `check: <package>.<module>:<function>`",
                          warning=not unbound_is_error))
            continue
        if not isinstance(check, str) or not _CHECK_RE.match(check):
            continue  # the schema reports it
        loc = K.CHECK.at(i)
        module, function = check.split(":")
        placement = binding_placement(loaded, i, packages)
        out += placement
        if any(d.code == "PV310" for d in placement):
            continue
        params = _dict(f.get(K.PARAMS.key))
        reserved = [k for k in params if k in HARNESS_KEYWORDS]
        try:
            signature = ctx.index.find_function(module, function)
        except Unresolved as exc:
            out.append(_d(loaded, loaded.position(loc), exc.code, f"check {check!r}: {exc.message}", exc.hint))
            continue
        keys = [k for k in params if isinstance(k, str) and k not in reserved]
        if f.get(K.SUBJECTS.key) and ctx.workspace.subject_param not in keys:
            # the harness fills it with the subject (`subject` for a check without that parameter)
            takes_own = signature.accepts(ctx.workspace.subject_param) or not signature.names("subject")
            keys.append(ctx.workspace.subject_param if takes_own else "subject")
        if f.get(K.RUNTIMES.key):
            keys.append("runtime")  # the harness fills it with the runtime's adapter
        problems = signature.problems(keys)
        if isinstance(f.get(K.TOLERANCE.key), dict) and not signature.names("tolerance"):
            out.append(_d(loaded, loaded.position(K.TOLERANCE.at(i), key=True), "PV317",
                          f"falsifier {fid} sets `tolerance:` but check {check!r} has no `tolerance` parameter, "
                          "so the harness never passes it", "add `tolerance=None` to the check, or drop the override",
                          warning=True))
        where = f"{ctx.workspace.rel(signature.path)}:{signature.line}" if problems else ""
        for code, message, key in problems:
            if key and key not in params:  # the subject parameter: said where the subjects are
                pos = loaded.position(K.SUBJECTS.at(i), key=True)
            else:
                pos = loaded.position(K.PARAMS.at(i) + (key,), key=True) if key else loaded.position(loc)
            out.append(_d(loaded, pos, code, f"check {check!r}: {message}", f"see {where}"))
    return out


def mutants(loaded: LoadedContract, ctx: Context) -> list[Diagnostic]:
    declared = [(i, j, m) for i, f in _falsifiers(loaded.data)
                for j, m in enumerate(_list(f.get(K.MUTANTS.key))) if isinstance(m, str)]
    if not declared:
        return []
    module = ctx.workspace.mutants_module
    known = ctx.index.mutant_names(module) if module else None
    if known is None:
        hint = (f"mutants module {module!r} does not exist yet; declare it with @mutant({declared[0][2]!r})"
                if module else "set [tool.pv] mutants_module to the module that declares mutants")
    out = []
    for i, j, name in declared:
        if known is not None and name in known:
            continue
        if known is not None:
            hint = did_you_mean(name, sorted(known), f"declare it in {module} with @mutant({name!r})",
                                cutoff=NEAR_CUTOFF)
        out.append(_d(loaded, loaded.position(K.MUTANTS.at(i) + (j,)), "PV309",
                      f"unknown mutant {name!r}", hint))
    return out + mutant_runtimes(loaded, ctx, declared)


def mutant_runtimes(loaded: LoadedContract, ctx: Context, declared: list[tuple[int, int, str]]) -> list[Diagnostic]:
    """PV321: a declared mutant's `runtimes=` is unreadable or names no runtime of [tool.pv]
    runtimes; PV320: the mutant is planted in no runtime the falsifier runs on, so `pv strength`
    could never meet it (pv.mutation.meets)."""
    from pv import mutation

    module = ctx.workspace.mutants_module
    found = ctx.index.mutant_runtimes(module) if module else None
    if not found:
        return []
    table = ctx.workspace.runtimes
    falsifiers = dict(_falsifiers(loaded.data))
    out = []
    for i, j, name in declared:
        if name not in found:
            continue  # PV309 said so
        runtimes, problem = found[name]
        # looked up only for a finding: a remembered file (pv.loadcache) has no node tree to ask
        pos = functools.partial(loaded.position, K.MUTANTS.at(i) + (j,))
        unknown = [rt for rt in runtimes or () if rt not in table]
        if problem or unknown:
            out.append(_d(loaded, pos(), "PV321", f"mutant {name!r}: " + (problem or (
                f"runtimes= names {', '.join(map(repr, unknown))}, not one of [tool.pv] runtimes "
                f"({', '.join(table) or 'none'})")), f"fix @mutant({name!r}, runtimes=...) in {module}"))
            continue
        ran_on = [rt for rt in _list(falsifiers[i].get(K.RUNTIMES.key)) if isinstance(rt, str)] or [None]
        planted = mutation.planted_in(runtimes, table)
        if not any(mutation.meets(planted, rt, table) for rt in ran_on):
            where = ", ".join(rt for rt in ran_on if rt) or f"its own code (the default runtime, {next(iter(table), 'none')})"
            out.append(_d(loaded, pos(), "PV320",
                          f"mutant {name!r} is planted in {', '.join(sorted(planted or ()))} only, and the falsifier "
                          f"runs on {where}: it can never meet the bug",
                          f"add a runtime the bug is planted in to `runtimes:`, or declare the bug's equivalent "
                          f"on this falsifier's runtime (a mutant with runtimes= in {module})"))
    return out


# --- across the contracts dir ----------------------------------------------------------------


@dataclass(frozen=True)
class _Site:
    loaded: LoadedContract
    loc: tuple  # the position is looked up only when a diagnostic needs it

    @property
    def pos(self) -> tuple[int, int]:
        return self.loaded.position(self.loc)

    def where(self) -> str:
        line, col = self.pos
        return f"{self.loaded.display_path}:{line}:{col}"


def check_all(files: Iterable[LoadedContract]) -> list[Diagnostic]:
    files = [f for f in files if isinstance(f.data, dict)]
    return unique_ids(files) + dependencies(files)


def unique_ids(files: list[LoadedContract]) -> list[Diagnostic]:
    # (file, index) per id, in the order met; a _Site is made only for an id met twice
    found: dict[tuple[str, str], list[tuple[LoadedContract, int]]] = {}
    for loaded in files:
        cid = _dict(loaded.data.get(K.METADATA.key)).get(K.CONTRACT_ID.key)
        if isinstance(cid, str):
            found.setdefault(("PV301", cid), []).append((loaded, 0))
        for i, f in _falsifiers(loaded.data):
            if isinstance(f.get(K.FALSIFIER_ID.key), str):
                found.setdefault(("PV302", f[K.FALSIFIER_ID.key]), []).append((loaded, i))
        for i, o in _obligations(loaded.data):
            if isinstance(o.get(K.OBLIGATION_ID.key), str):
                found.setdefault(("PV303", o[K.OBLIGATION_ID.key]), []).append((loaded, i))
    words = {"PV301": "contract", "PV302": "falsifier", "PV303": "obligation"}
    out = []
    for (code, ident), met in found.items():
        if len(met) < 2:
            continue
        where = [_Site(loaded, K.CONTRACT_ID.at() if code == "PV301" else
                       (K.FALSIFIER_ID if code == "PV302" else K.OBLIGATION_ID).at(i)) for loaded, i in met]
        for site in where:
            others = ", ".join(o.where() for o in where if o is not site)
            out.append(_d(site.loaded, site.pos, code, f"duplicate {words[code]} id {ident!r}, also at {others}",
                          f"{words[code]} ids are unique across the contracts dir; rename one"))
    return out


def dependencies(files: list[LoadedContract]) -> list[Diagnostic]:
    owner: dict[str, LoadedContract] = {}
    for loaded in files:
        cid = _dict(loaded.data.get(K.METADATA.key)).get(K.CONTRACT_ID.key)
        if isinstance(cid, str):
            owner.setdefault(cid, loaded)
    edges: dict[str, list[tuple[str, tuple]]] = {}
    out = []
    for cid, loaded in owner.items():
        for j, target in enumerate(_list(_dict(loaded.data.get(K.METADATA.key)).get(K.DEPENDS_ON.key))):
            if not isinstance(target, str):
                continue
            loc = K.DEPENDS_ON.at() + (j,)
            if target in owner:
                edges.setdefault(cid, []).append((target, loc))
                continue
            pos = loaded.position(loc)
            stripped = re.sub(r"-v[0-9]+$", "", target)
            hint = did_you_mean(target, sorted(owner),
                                f"depends_on names contract ids ({stripped!r}), not file names" if stripped in owner else
                                "depends_on names metadata.id of a contract in the contracts dir", cutoff=NEAR_CUTOFF)
            out.append(_d(loaded, pos, "PV306", f"depends_on {target!r}: no contract has that id", hint))
    for cycle in _cycles(edges):
        text = " -> ".join(cycle)
        for a, b in zip(cycle, cycle[1:]):
            loc = next(p for t, p in edges[a] if t == b)
            out.append(_d(owner[a], owner[a].position(loc), "PV307", f"depends_on cycle: {text}",
                          "a contract cannot depend on itself, directly or through others"))
    return out


def _cycles(edges: dict[str, list[tuple[str, tuple]]]) -> list[list[str]]:
    """Each elementary cycle found by depth-first search, once, as [a, b, ..., a] starting
    at its smallest id."""
    white, grey, black = 0, 1, 2
    colour: dict[str, int] = {}
    found: dict[tuple[str, ...], list[str]] = {}
    for start in sorted(edges):
        if colour.get(start, white) != white:
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        path: list[str] = [start]
        colour[start] = grey
        while stack:
            node, k = stack[-1]
            targets = edges.get(node, [])
            if k < len(targets):
                stack[-1] = (node, k + 1)
                target = targets[k][0]
                state = colour.get(target, white)
                if state == white:
                    colour[target] = grey
                    stack.append((target, 0))
                    path.append(target)
                elif state == grey:
                    cycle = path[path.index(target):]
                    low = cycle.index(min(cycle))
                    canon = tuple(cycle[low:] + cycle[:low])
                    found.setdefault(canon, list(canon) + [canon[0]])
            else:
                colour[node] = black
                stack.pop()
                path.pop()
    return [found[k] for k in sorted(found)]
