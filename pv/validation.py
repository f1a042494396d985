"""The validation engine behind `pv validate`: strict schema and the checks beyond it.

`validate(workspace, files)` loads every contract of the contracts dir (so cross-checks see
them all), checks the selected files, and returns a `Report` holding only their
diagnostics. Large sets are checked in this process and forked children (`jobs_for`). Where
nothing is remembered or recorded (`PV_NO_CACHE=1`), a smaller set's per-file checks run in a
child beside PV501, and PV501's contracts are judged in two halves (pv.forked): the report is
the one process's, byte for byte (tests/test_forked.py). Nothing here imports torch, jinja2 or
pytest: check bindings are verified by parsing (pv.staticcheck).
"""

from __future__ import annotations

import gc
import glob
import os
from dataclasses import dataclass, field
from pathlib import Path

from pv.config import Workspace
from pv.diagnostics import Diagnostic, Severity, internal_error, sort_key

DIALECTS = ("pv", "provable-contracts")

KEPT: list | None = None
"""None: what a run built is freed when the run is done with it. A list: kept in it instead, and
hidden from the collector (gc.freeze), by a process that ends without tearing down (`pv
validate` itself: pv.cli ends it with os._exit): freeing the ledger's records, PV501's syntax
trees and the loaded files object by object was 0.06 s of a cold run, for memory nobody
needed again."""


def _keep(*built: object) -> None:
    if KEPT is not None:
        KEPT.append(built)


@dataclass
class Report:
    """What one validation run found, for the selected files."""

    files: int = 0
    contracts: int = 0  # files the schema accepted
    falsifiers: int = 0  # falsification tests in those contracts
    diagnostics: list[Diagnostic] = field(default_factory=list)
    loaded: dict = field(default_factory=dict)  # absolute Path -> LoadedContract (selected and the dir)
    dialect: object | None = None  # pv.dialect.DialectReport in the provable-contracts dialect

    @property
    def errors(self) -> int:
        return sum(d.severity is Severity.ERROR for d in self.diagnostics)

    @property
    def warnings(self) -> int:
        return len(self.diagnostics) - self.errors

    @property
    def ok(self) -> bool:
        return self.errors == 0

    def summary(self) -> str:
        return (f"{self.files} files, {self.contracts} contracts, {self.falsifiers} falsifiers: "
                f"{self.errors} errors, {self.warnings} warnings")


def display(path: Path) -> str:
    """A file as diagnostics name it: relative to the working directory when inside it."""
    absolute = os.path.abspath(path)
    cwd = os.getcwd()
    if absolute == cwd or absolute.startswith(cwd.rstrip(os.sep) + os.sep):
        return os.path.relpath(absolute, cwd)
    return str(path)


def expand_paths(paths: list[str] | tuple[str, ...]) -> tuple[list[Path], list[Diagnostic]]:
    """Files named on the command line: files as given, directories searched for *.yaml/*.yml,
    unexpanded glob patterns expanded here. Paths that match nothing become PV100."""
    files: list[Path] = []
    problems: list[Diagnostic] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():  # hidden files and folders (.venv, .git, .pre-commit-config.yaml) are not contracts
            files += sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()
                            and not any(part.startswith(".") for part in p.relative_to(path).parts))
        elif path.exists():
            files.append(path)
        elif glob.has_magic(str(raw)):
            files += sorted(Path(p) for p in glob.glob(str(raw), recursive=True) if Path(p).is_file())
        else:
            problems.append(Diagnostic(path=str(raw), line=0, col=0, code="PV100",
                                       message="cannot read file: no such file or directory"))
    unique: dict[str, Path] = {}
    for f in files:
        unique.setdefault(os.path.abspath(f), f)
    return list(unique.values()), problems


def validate(workspace: Workspace, files: list[Path] | None = None, *, strict_bindings: bool | None = None,
             dialect: str = "pv", jobs: int = 1) -> Report:
    """Validate `files` (default: every contract of the workspace). Cross-checks see the whole
    contracts dir; the report holds only the diagnostics of `files`. Never raises for bad
    input: an unexpected exception becomes a PV199 diagnostic naming the file. `jobs` > 1
    checks files in that many forked processes (the CLI picks it with jobs_for())."""
    selected = list(files) if files is not None else workspace.contract_files()
    report = Report(files=len(selected))
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}")
    was_collecting = gc.isenabled()
    gc.disable()  # thousands of YAML node trees stay alive: generational GC would rescan them all
    try:
        if dialect == "provable-contracts":
            from pv.dialect import read_dialect

            report.diagnostics, report.dialect = read_dialect(selected, display)
            report.contracts = report.dialect.strict_valid
            report.falsifiers = report.dialect.falsifiers
            return report
        return _validate_pv(workspace, selected, report, strict_bindings, jobs)
    finally:
        if was_collecting:
            gc.enable()


def _validate_pv(workspace: Workspace, selected: list[Path], report: Report, strict_bindings: bool | None,
                 jobs: int = 1) -> Report:
    from pv import crosscheck

    ctx = crosscheck.Context(workspace)
    if strict_bindings is not None:
        ctx.strict_bindings = strict_bindings

    chosen = {Path(os.path.abspath(p)): p for p in selected}
    scope = dict(chosen)
    for p in workspace.contract_files():
        scope.setdefault(Path(os.path.abspath(p)), p)
    items = [(resolved, path, display(path), resolved in chosen) for resolved, path in scope.items()]
    shown = {name for _, _, name, is_selected in items if is_selected}
    ctx.load_facts.get("")  # read before any worker is forked: each inherits it
    if jobs > 1 and not os.environ.get("PV_JOBS") and _mostly_remembered(items, ctx):
        jobs = 1  # after an edit: what is left to compute costs less than forking and pickling
    beside, loads = None, []
    if jobs == 1 and _unremembered():
        # nothing remembered or recorded: the per-file checks run in a forked child beside PV501
        loads = [_load_one(item, ctx) for item in items]
        if (_claims([load[0] for (resolved, _, _, _), load in zip(items, loads) if resolved in chosen])
                and _idle_core()):
            from pv.forked import Forked

            beside = Forked(lambda: _check_loaded(items, loads, ctx))
            if not beside.forked:  # checked here first, as without a child (PV501 reuses their syntax trees)
                beside = None
        checked = None if beside is not None else [_checked(item, load, ctx) for item, load in zip(items, loads)]
    else:
        checked = _check_files(items, ctx, jobs)
        ctx.file_facts.save()
        ctx.load_facts.save()
        ctx.index.save()
    for (resolved, _, _, _), (loaded, *_) in zip(items, checked if checked is not None else loads):
        if loaded is not None:
            report.loaded[resolved] = loaded
            accepted = loaded.accepted() if resolved in chosen else None
            if accepted is not None:
                report.contracts += 1
                report.falsifiers += accepted[0]
    across: list[Diagnostic] = []
    try:
        across = [d for d in crosscheck.check_all(report.loaded.values()) if d.path in shown]
    except Exception as exc:  # noqa: BLE001
        where = display(workspace.pyproject) if workspace.pyproject else str(workspace.contracts_dir)
        across.append(internal_error(where, exc))
    claimed = declared_status(workspace, [c for p, c in report.loaded.items() if p in chosen])
    if beside is not None:
        checked = [(load[0], found) for load, found in zip(loads, beside.result())]
    diagnostics: list[Diagnostic] = [d for _, found in checked for d in found]
    report.diagnostics = sorted(diagnostics + across + claimed, key=sort_key)
    _keep(ctx, loads, checked)
    return report


def checked_report(workspace: Workspace, files: list[Path], missing: list[Diagnostic], strict_bindings: bool | None,
                   dialect: str) -> Report:
    """What `pv validate` reports on `files` (`missing`: PV100 for the paths that matched
    nothing): replayed where none of the run's inputs changed (pv.replay), else validated and
    recorded for the next run. The click command and `pv`'s own plain command lines
    (pv.replay.fast_validate) both print this report."""
    from pv import readlog, replay
    from pv.diagnostics import with_default_hint

    contract_files = workspace.contract_files()
    # An unchanged run is replayed from its recorded inputs (pv.replay); `pv` tries that first
    key = None if missing or dialect != "pv" else replay.run_key(workspace, files, contract_files,
                                                                 replay.options(strict_bindings, dialect))
    report = replay.replayed(workspace.root, key) if key else None
    if report is None:
        recorder = readlog.start(workspace.root, [workspace.pyproject]) if key else None
        collecting = gc.isenabled()
        gc.disable()  # kept off until the loaded files are dropped: see below
        try:
            scope = len(set(map(os.path.abspath, files)) | set(map(os.path.abspath, contract_files)))
            report = validate(workspace, files, strict_bindings=strict_bindings, dialect=dialect, jobs=jobs_for(scope))
        except Exception as exc:  # noqa: BLE001 - never a traceback; name what failed
            report = Report(files=len(files), diagnostics=[internal_error(display(workspace.root), exc)])
        finally:
            readlog.stop(recorder)
            # The command needs no loaded file: dropped here, their node trees are freed by
            # reference counting, so the collector that comes back on never scans them (a
            # quarter of the CPU of 1,000 contracts).
            if report is not None:
                _keep(report.loaded)
                report.loaded = {}
            if KEPT is not None:
                gc.freeze()
            if collecting:
                gc.enable()
        report.diagnostics = sorted((with_default_hint(d) for d in missing + report.diagnostics), key=sort_key)
        report.files += len(missing)
        if key:
            replay.store(workspace.root, key, recorder, report)
    return report


PARALLEL_MIN_FILES = 200
"""From this many files on, Linux machines with several cores load and check them in forked
worker processes (`PV_JOBS=1` turns that off, `PV_JOBS=N` sets the number), unless pv's caches
already hold nearly every file (a run after an edit: one process is faster then)."""

def _check_one(item, ctx) -> tuple:
    """Load one file and, when it is selected, check it: (LoadedContract | None, diagnostics)."""
    return _checked(item, _load_one(item, ctx), ctx)


def _load_one(item, ctx) -> tuple:
    """The first half of _check_one: (LoadedContract | None, its problems, what loading raised)."""
    from pv.loader import load_contract

    _, path, name, _ = item
    try:
        loaded, problems = load_contract(path, name, ctx.load_facts)
    except Exception as exc:  # noqa: BLE001 - a bug in pv must not hide the other problems
        return None, [], exc
    return loaded, problems, None


def _checked(item, load: tuple, ctx) -> tuple:
    """The second half of _check_one: the loaded file checked (when selected)."""
    from pv import crosscheck

    _, _, name, is_selected = item
    loaded, problems, failed = load
    if not is_selected:
        return loaded, []
    if failed is not None:
        return loaded, problems + [internal_error(name, failed)]
    try:
        if loaded is not None:
            problems = problems + crosscheck.check_file(loaded, ctx)
        return loaded, problems
    except Exception as exc:  # noqa: BLE001 - a bug in pv must not hide the other problems
        return loaded, problems + [internal_error(name, exc)]


def _check_loaded(items: list, loads: list, ctx) -> list[list[Diagnostic]]:
    """Each file's diagnostics, _checked from what _load_one made of it (in a forked child)."""
    return [_checked(item, load, ctx)[1] for item, load in zip(items, loads)]


def _unremembered() -> bool:
    """Whether this run remembers and records nothing (PV_NO_CACHE=1): work done in a forked
    child then leaves nothing behind that the run needs but its value (pv.forked)."""
    from pv import cache

    return not cache.enabled()


def _idle_core() -> bool:
    from pv.forked import idle_core

    return idle_core()


def _claims(loaded: list) -> bool:
    """Whether some of these files declares a status above DRAFT (PV501 judges its evidence)."""
    from pv.schema import STATUS_RANK

    return any(c is not None and (a := c.accepted()) is not None and STATUS_RANK.get(a[1], 0) > 0 for c in loaded)


def _taken(items: list, chunks: list, tokens, ctx) -> tuple:
    """What a forked child hands back of the files of the chunks it took: {index: (LoadedContract
    without its node tree and model, diagnostics)}, and the facts and inputs it found, which the
    parent remembers and records as the run's."""
    from pv import readlog

    checked = {}
    for chunk in iter(tokens.take, None):
        for n in chunks[chunk]:
            checked[n] = loaded, _ = _check_one(items[n], ctx)
            if loaded is not None:
                loaded.node = None  # the parent re-composes the few files whose positions it needs
                loaded.without_model()  # and validates again the few models it needs (PV501's claiming contracts)
    return checked, (ctx.file_facts.take_added(), ctx.load_facts.take_added(), readlog.take_noted(),
                     ctx.index.take_added())


def _mostly_remembered(items: list, ctx) -> bool:
    """Whether pv's caches hold the YAML of at least 90% of the files' current bytes (measured
    on 1,000 contracts after one edit: 0.53 s in one process, 0.60 s with two workers)."""
    from pv.loadcache import is_remembered

    if not ctx.load_facts.active:
        return False
    remembered = sum(is_remembered(path, name, ctx.load_facts) for _, path, name, _ in items)
    return remembered >= 0.9 * len(items)


def jobs_for(count: int) -> int:
    """How many processes check `count` files."""
    wanted = os.environ.get("PV_JOBS", "")
    if wanted.isdigit() and int(wanted) > 0:
        jobs = int(wanted)
    elif count < PARALLEL_MIN_FILES:
        return 1
    else:
        try:
            jobs = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            jobs = os.cpu_count() or 1
    return max(1, min(jobs, 8, count))


def _check_files(items: list, ctx, jobs: int = 1) -> list[tuple]:
    """_check_one of every item; with `jobs` > 1, in that many processes: this one and forked
    children (pv.forked), each taking the next chunk of files nobody took (pv.forked.Tokens: a
    process slowed by a busy core takes fewer), this one reading what each child hands back
    once no chunk is left (collecting results while checking competed with its own files, and
    an idle parent was a core unused). A file a child took but did not hand back is checked
    here."""
    size = max(1, len(items) // (jobs * 16))
    chunks = [range(start, min(start + size, len(items))) for start in range(0, len(items), size)]
    from pv.forked import tokens as make_tokens

    tokens = make_tokens(len(chunks)) if jobs > 1 and len(items) > 1 else None
    if tokens is not None:
        from pv import readlog
        from pv.forked import Forked

        try:
            children = [Forked(lambda: _taken(items, chunks, tokens, ctx), here=lambda: None) for _ in range(jobs - 1)]
            checked: list = [None] * len(items)
            for chunk in iter(tokens.take, None):
                for n in chunks[chunk]:
                    checked[n] = loaded, _ = _check_one(items[n], ctx)
                    if loaded is not None:
                        loaded.node = None  # as the children's: memory for the next file's tree, not kept for a position
        finally:
            tokens.close()
        for child in children:
            handed = child.result()
            if handed is not None:  # checked in the child: what it found is the run's too
                results, (facts, load_facts, noted, index_facts) = handed
                ctx.file_facts.merge(facts)
                ctx.load_facts.merge(load_facts)
                readlog.merge_noted(noted)
                ctx.index.merge(index_facts)
                for n, result in results.items():
                    checked[n] = result
        return [result if result is not None else _check_one(item, ctx) for item, result in zip(items, checked)]
    return [_check_one(item, ctx) for item in items]


def declared_status(workspace: Workspace, loaded: list) -> list[Diagnostic]:
    """PV501 (pv.lifecycle): a declared metadata.status above what the ledger's evidence supports.
    The ledger is read only when some contract declares more than DRAFT. Each contract's share
    is recorded and replayed on its own (pv.replay parts): after one edit, only the edited
    contract's evidence is judged again."""
    from pv.schema import STATUS_RANK

    claiming = [c for c in loaded if (a := c.accepted()) is not None and STATUS_RANK.get(a[1], 0) > 0]
    if not claiming:
        return []
    try:
        from pv import readlog, replay

        found: list[Diagnostic] = []
        todo = []
        keys = [replay.part_key("PV501", workspace, contract) for contract in claiming]
        for contract, key, remembered in zip(claiming, keys, replay.replayed_parts(workspace.root, keys)):
            if remembered is None:
                todo.append((contract, key))
            else:
                found += _placed(*remembered, contract)
        if todo:
            from pv import declared, ledgerindex
            from pv.codebind import TreeDigests
            from pv.identity import EvidenceCheck
            from pv.staticcheck import ModuleIndex

            # once, not per contract; after an edit, only the lines of the contracts judged again (pv.ledgerindex)
            groups = ledgerindex.groups(workspace.root, workspace.ledger, [c.contract.metadata.id for c, _ in todo])
            from pv.forked import tokens as make_tokens

            tokens = make_tokens(len(todo)) if len(todo) > 1 and _unremembered() and _idle_core() else None
            if tokens is not None:
                # nothing recorded per contract: judged here and in a forked child (it has the groups),
                # each taking the next contract nobody took
                from pv.forked import Forked

                judge = _Judge(workspace, groups)
                judge.warm()
                try:
                    beside = Forked(lambda: judge.taken(todo, tokens), here=lambda: None)
                    mine = judge.taken(todo, tokens)
                finally:
                    tokens.close()
                found += judge.in_order(todo, [mine, beside.result()])
                _keep(groups, judge)
                return found
            shared = None  # one tree and one index for every contract when nothing is recorded (PV_NO_CACHE=1)
            tree, indexes = None, []
            for contract, key in todo:
                part = readlog.start(workspace.root, [workspace.ledger])
                try:
                    # a fresh tree and index per recorded contract: what they read for this contract
                    # is this part's input. Module digests are remembered by the bytes they came from (pv.cache).
                    tree, modules = shared or (TreeDigests(workspace.root, persist=True),
                                               ModuleIndex(workspace.root, autosave=False))
                    shared = None if part is not None else (tree, modules)
                    indexes.append(modules)
                    check = EvidenceCheck(workspace, [contract], tree, modules)
                    share = declared.declared_status_diagnostics([contract], groups, check, workspace.subject_param)
                finally:
                    readlog.stop(part)
                replay.store_part(workspace.root, key, part, share, contract.sha256)
                found += share
            if tree is not None:  # the digest stores are one per process (pv.codebind): written once, not per contract
                tree.save()
            for index in indexes[1:]:  # what each found, written once
                if index is not indexes[0]:
                    indexes[0].merge(index.take_added())
            if indexes:
                indexes[0].save()
            _keep(groups, tree, indexes)
        return found
    except Exception as exc:  # noqa: BLE001
        return [internal_error(display(workspace.ledger), exc)]


class _Judge:
    """PV501's shares where nothing is recorded or remembered: declared_status's loop without its
    recordings, one tree and one index for every contract this process judges."""

    def __init__(self, workspace: Workspace, groups: dict) -> None:
        self.workspace, self.groups = workspace, groups
        self._check: tuple | None = None

    def _digests(self) -> tuple:
        if self._check is None:
            from pv.codebind import TreeDigests
            from pv.staticcheck import ModuleIndex

            self._check = (TreeDigests(self.workspace.root, persist=True), ModuleIndex(self.workspace.root, autosave=False))
        return self._check

    def warm(self) -> None:
        """Before the processes that judge contracts split: what each would otherwise do on its
        own whatever it judges, done once and inherited: the mutants module's scan (its syntax
        trees, which the evidence's digests read again, held by the index) and the code
        generator's template (jinja2). Only answers that the judging computes the same way
        when asked; a failure here is left for the judging to meet."""
        try:
            from pv.codegen import TEMPLATE, _environment

            module = self.workspace.mutants_module
            if module:
                self._digests()[1].mutant_defs(module)
            _environment().get_template(TEMPLATE)
        except Exception:  # noqa: BLE001
            pass

    def share(self, contract) -> list[Diagnostic]:
        from pv import declared
        from pv.identity import EvidenceCheck

        check = EvidenceCheck(self.workspace, [contract], *self._digests())
        return declared.declared_status_diagnostics([contract], self.groups, check, self.workspace.subject_param)

    def taken(self, todo: list, tokens) -> tuple[dict[int, list[Diagnostic]], tuple[int, Exception] | None]:
        """The share of each contract of `todo` this process takes, up to the first that raised:
        ({index: share}, (its index, what it raised) or None)."""
        shares: dict[int, list[Diagnostic]] = {}
        for n in iter(tokens.take, None):
            try:
                shares[n] = self.share(todo[n][0])
            except Exception as exc:  # noqa: BLE001 - raised by in_order, where the loop would meet it
                return shares, (n, exc)
        return shares, None

    def in_order(self, todo: list, handed: list) -> list[Diagnostic]:
        """The shares in todo's order, as one loop over todo gives them: each process's, a contract
        that a child took but did not hand back judged here, and the first failure in that order
        raised (tokens are taken in order: a contract nobody took comes after every failure)."""
        shares: dict[int, list[Diagnostic]] = {}
        failed: dict[int, Exception] = {}
        for part in handed:
            if part is not None:
                shares.update(part[0])
                if part[1] is not None:
                    failed[part[1][0]] = part[1][1]
        out: list[Diagnostic] = []
        for n, (contract, _) in enumerate(todo):
            if n in failed:
                raise failed[n]
            out += shares[n] if n in shares else self.share(contract)
        return out


def _placed(diagnostics: list[Diagnostic], judged_sha256: str, loaded) -> list[Diagnostic]:
    """A replayed PV501 share's findings where they are in `loaded`: the share was judged on the
    same data (pv.replay.part_key), but on bytes whose sha256 is `judged_sha256`. Where the bytes
    differ (a comment or the layout edited), each finding is at `metadata.status` as it is now
    (pv.declared.declared_status_diagnostics puts it there)."""
    if not diagnostics or judged_sha256 == loaded.sha256:
        return diagnostics
    from dataclasses import replace

    from pv.keypaths import STATUS

    line, col = loaded.position(STATUS.at())
    return [replace(d, line=line, col=col) for d in diagnostics]


def render(report: Report, fmt: str = "text", quiet: bool = False) -> str:
    shown = [d for d in report.diagnostics if not (quiet and d.severity is Severity.WARNING)]
    if fmt == "json":
        from pv.diagnostics import render_json

        extra: dict = {"contracts": report.contracts, "falsifiers": report.falsifiers}
        if report.dialect is not None:
            extra["dialect"] = report.dialect.to_dict()  # type: ignore[attr-defined]
        text = render_json(shown, report.files, **extra)
        if quiet:  # counts stay those of the whole run
            import json

            data = json.loads(text)
            data["errors"], data["warnings"] = report.errors, report.warnings
            text = json.dumps(data, indent=2)
        return text
    lines = [d.format() for d in shown]
    lines.append(report.summary())
    if report.dialect is not None:
        lines.append(report.dialect.format_text())  # type: ignore[attr-defined]
    return "\n".join(lines)
