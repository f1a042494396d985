"""Replaying `pv validate`: the report of a run whose every input is unchanged, without checking again.

A validation run is a function of what it reads. So while `pv validate` checks, a
`pv.readlog.Recorder` notes every input the run touches (files read, directories listed, paths
whose kind was asked).

After the run every file read is hashed (sha256); a file that changed while the run read it
makes the run unrecordable. The report is stored with that list of inputs under a key of what
is not a file read: pv's own files (by content), the interpreter, its sys.path and the installed distributions (by name and
time), the working directory (diagnostics name paths relative to it), the workspace settings,
the files selected and the options. A later run with the same key replays the report only if
every input is still what it was: each file's sha256, each listing, each path's kind. Anything
else is a miss, and the full validation runs (and records again).

Not inputs (the key covers them): pv's own package, the interpreter's prefix and site-packages,
and pv's caches. A result that holds an internal error (PV199) is never stored.

The stored runs are signed like every pv cache (pv.cache: an HMAC under a per-user secret outside
the repository), so a `.pv-cache/` shipped with a repository, or edited by hand, can never make
pv replay "valid" for a contract it did not judge valid. `pv.cli` tries the replay before click,
pydantic or PyYAML is imported: a hit costs hashing the inputs and printing the report.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from pv import cache, readlog

REPLAY_VERSION = "validate-replay-2"
RUNS_DIR = cache.CACHE_DIR / "validate-runs"
PARTS_DIR = cache.CACHE_DIR / "validate-parts"
MAX_RUNS = 64  # stored runs kept: one per key (the whole dir, each set of files a hook passed)
MAX_PARTS = 20_000  # stored parts kept: one per contract's data (old versions of a contract age out)
_PACKAGE = Path(__file__).resolve().parent


# --- the key ---------------------------------------------------------------------------------


_DIGESTS: dict[str, str] = {}


def package_digest() -> str:
    """sha256 of every file of pv's own package (sources and data): replayed only for this pv."""
    if "pv" not in _DIGESTS:
        h = hashlib.sha256()
        for base, dirs, names in os.walk(_PACKAGE):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(names):
                path = os.path.join(base, name)
                h.update(os.path.relpath(path, _PACKAGE).encode("utf-8", "surrogateescape") + b"\0")
                try:
                    with open(path, "rb") as handle:
                        h.update(hashlib.sha256(handle.read()).digest())
                except OSError:
                    h.update(b"unreadable")
        _DIGESTS["pv"] = h.hexdigest()
    return _DIGESTS["pv"]


def environment() -> str:
    """The interpreter, its module search path and its installed distributions (a
    distribution's metadata folder is made anew by every install, upgrade or reinstall).
    Taken once per process and search path: a run and its parts are judged in one environment."""
    memo = f"environment {sys.path!r}"
    if memo in _DIGESTS:
        return _DIGESTS[memo]
    parts = [sys.version, sys.executable, sys.platform, repr(sys.path), repr(tuple(sys.flags))]
    for directory in readlog.site_dirs():
        try:
            with os.scandir(directory) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    if entry.name.endswith((".dist-info", ".egg-info", ".egg-link", ".pth")):
                        parts.append(f"{directory}/{entry.name}:{entry.stat(follow_symlinks=False).st_mtime_ns}")
        except OSError:
            parts.append(f"{directory}: unreadable")
    _DIGESTS[memo] = "\n".join(parts)
    return _DIGESTS[memo]


def run_key(workspace: Any, files: list[Path], scope: list[Path], options: dict[str, Any]) -> str:
    """What decides a run besides the files it reads (pv's PV_* settings among it)."""
    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith("PV_"))
    return cache.key_of(REPLAY_VERSION, package_digest(), environment(), repr(settings), os.getcwd(), repr(workspace),
                        "\0".join(f"{os.path.abspath(p)}\0{p}" for p in files),
                        "\0".join(os.path.abspath(p) for p in scope), json.dumps(options, sort_keys=True))


# --- storing and replaying -------------------------------------------------------------------


def _run_file(root: Path, key: str, where: Path = RUNS_DIR) -> Path:
    return Path(root) / where / f"{key}.json"


def _write(path: Path, key: str, recorder: readlog.Recorder | None, payload: dict[str, Any], keep: int | None = None) -> None:
    """Keep `payload` for `key` with the inputs the recorder saw, signed (pv.cache); at most
    `keep` (default MAX_RUNS) files stay beside it."""
    keep = MAX_RUNS if keep is None else keep
    if recorder is None or not recorder.usable or not cache.enabled():
        return
    inputs = recorder.inputs()
    if inputs is None:
        return
    body = json.dumps({"version": REPLAY_VERSION, "key": key, "inputs": inputs, **payload},
                      separators=(",", ":")).encode()
    signed = cache.sign(body)
    if signed is None:
        return
    try:
        from pv.atomic import write_bytes, write_text

        path.parent.mkdir(parents=True, exist_ok=True)
        ignore = path.parent.parent / ".gitignore"
        if not ignore.exists():
            write_text(ignore, "# pv's cache of decided facts (pv/cache.py); safe to delete\n*\n", durable=False)
        write_bytes(path, signed, durable=False)
        names = [n for n in os.listdir(path.parent) if n.endswith(".json") and not n.startswith(".")]
        if len(names) > keep:  # the oldest go (listed first: stat only when there are too many)
            runs = sorted((path.parent / n for n in names), key=lambda p: p.stat().st_mtime_ns)
            for old in runs[:-keep]:
                old.unlink(missing_ok=True)
    except OSError:
        pass


def _read(path: Path, key: str, seen: dict[tuple[str, str], str | None] | None = None) -> dict[str, Any] | None:
    """The stored payload for `key` if its signature verifies and every input is unchanged."""
    if not cache.enabled():
        return None
    try:
        body = cache.verified(path.read_bytes())
        data = json.loads(body) if body is not None else None
    except (OSError, ValueError, RecursionError):
        return None
    if not (isinstance(data, dict) and data.get("version") == REPLAY_VERSION and data.get("key") == key):
        return None
    return data if unchanged(data.get("inputs"), seen) else None


def _diagnostics(rows: Any) -> list[Any]:
    from pv.diagnostics import Diagnostic, Severity

    return [Diagnostic(path=str(d["path"]), line=int(d["line"]), col=int(d["col"]), code=str(d["code"]),
                       message=str(d["message"]), hint=str(d["hint"]), severity=Severity(d["severity"]))
            for d in rows]


def store(root: Path, key: str, recorder: readlog.Recorder | None, report: Any) -> None:
    """Keep `report` (pv.validation.Report) for `key` with the inputs the recorder saw."""
    if any(d.code == "PV199" for d in report.diagnostics):
        return  # a bug in pv (or a file it could not read) is reported every time
    _write(_run_file(root, key), key, recorder,
           {"report": {"files": report.files, "contracts": report.contracts, "falsifiers": report.falsifiers,
                       "diagnostics": [d.to_json() for d in report.diagnostics]}})


def _now(what: str, where: str) -> str | None:
    """What a recorded input is now (None: not an input pv records)."""
    if what == "kind":
        follow, _, path = where.partition(":")
        return readlog.path_kind(path, follow == "stat")
    return readlog.listing_digest(where) if what == "listing" else readlog.file_digest(where) if what == "file" else None


def unchanged(inputs: Any, seen: dict[tuple[str, str], str | None] | None = None) -> bool:
    """Whether every recorded input is still what it was. `seen` (what each input was found to
    be, filled as they are looked at) lets the parts of one run, which share most of their
    inputs, look at each once (replayed_parts)."""
    if not isinstance(inputs, list):
        return False
    for item in inputs:
        if type(item) is not list or len(item) != 3:
            return False
        what, where, value = item
        if type(what) is not str or type(where) is not str or type(value) is not str:
            return False
        if seen is None:
            now = _now(what, where)
        else:
            now = seen.get((what, where), False)
            if now is False:
                now = seen[(what, where)] = _now(what, where)
        if now is None or now != value:
            return False
    return True


def replayed(root: Path, key: str) -> Any:
    """The stored pv.validation.Report for `key` if its signature verifies and every input is
    unchanged, else None."""
    data = _read(_run_file(root, key), key)
    if data is None:
        return None
    try:
        from pv.validation import Report

        saved = data["report"]
        return Report(files=int(saved["files"]), contracts=int(saved["contracts"]),
                      falsifiers=int(saved["falsifiers"]), diagnostics=_diagnostics(saved["diagnostics"]))
    except (KeyError, TypeError, ValueError):
        return None


# --- parts of a run ----------------------------------------------------------------------------
# One contract's share of a costly check (PV501: its declared status against the evidence) is
# recorded and replayed on its own, so a run after one edit recomputes that contract's share only.
# A share is a function of what the contract says, not of its bytes: it is keyed by the digest of
# the contract's YAML data (pv.loadcache.data_digest), so an edit of comments or layout replays
# it. Its findings' positions are the one thing the bytes decide: a part keeps the sha256 of the
# bytes it was judged on, and the caller looks the positions up again where they differ.


def part_key(kind: str, workspace: Any, loaded: Any) -> str:
    """The key of one contract's share ("" where nothing is stored or replayed: PV_NO_CACHE=1)."""
    if not cache.enabled():
        return ""
    from pv.loadcache import digest_of_loaded

    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith("PV_"))
    digest = digest_of_loaded(loaded)
    content = f"data:{digest}" if digest is not None else f"bytes:{loaded.sha256}"  # data with no exact encoding
    return cache.key_of(REPLAY_VERSION, "part", kind, package_digest(), environment(), repr(settings), os.getcwd(),
                        repr(workspace), loaded.display_path, os.path.abspath(loaded.path), content)


def store_part(root: Path, key: str, recorder: readlog.Recorder | None, diagnostics: list[Any],
               file_sha256: str = "") -> None:
    """Keep one part's diagnostics, judged on a file whose bytes have `file_sha256`."""
    if key and not any(d.code == "PV199" for d in diagnostics):
        _write(_run_file(root, key, PARTS_DIR), key, recorder,
               {"diagnostics": [d.to_json() for d in diagnostics], "file_sha256": file_sha256}, MAX_PARTS)


def replayed_parts(root: Path, keys: list[str]) -> list[tuple[list[Any], str] | None]:
    """replayed_part of each key, every input shared by several parts looked at once."""
    seen: dict[tuple[str, str], str | None] = {}
    return [replayed_part(root, key, seen) for key in keys]


def replayed_part(root: Path, key: str,
                  seen: dict[tuple[str, str], str | None] | None = None) -> tuple[list[Any], str] | None:
    """A part's stored diagnostics, and the sha256 of the bytes they were judged on, when its
    every input is unchanged (those inputs become inputs of the run under way), else None.
    `seen`: see unchanged()."""
    data = _read(_run_file(root, key, PARTS_DIR), key, seen)
    if data is None:
        return None
    try:
        found = _diagnostics(data["diagnostics"]), str(data["file_sha256"])
    except (KeyError, TypeError, ValueError):
        return None
    for recorder in readlog.active():
        others = []
        for what, where, value in data["inputs"]:
            if what == "file":
                recorder.note_read(where)
            else:
                others.append((what, where, value))
        recorder.merge(others)
    return found


# --- the fast path -----------------------------------------------------------------------------


def options(strict_bindings: bool | None, dialect: str) -> dict[str, Any]:
    """The options that decide a report (--format and --quiet only print it)."""
    return {"strict_bindings": strict_bindings, "dialect": dialect}


def fast_validate(args: list[str], check: bool = False) -> int | None:
    """`pv validate ARGS` without click, for the plain command lines `pv` meets (a pre-commit
    hook, CI): answered from a stored run, before anything that checks is imported, or, with
    `check`, checked when nothing is stored (pv.validation.checked_report, what the click
    command runs: click only parses the options, a tenth of a run after an edit). Returns the
    exit status, the report printed; None when the arguments are anything but the plain ones, or
    nothing is stored and `check` is off, or anything fails: the click command runs as usual."""
    paths: list[str] = []
    fmt, quiet, strict, dialect = "text", False, None, "pv"
    rest = iter(args)
    for arg in rest:
        if arg in ("-q", "--quiet"):
            quiet = True
        elif arg in ("--strict-bindings", "--no-strict-bindings"):
            strict = arg == "--strict-bindings"
        elif arg.split("=", 1)[0] in ("--format", "--dialect"):
            name, equals, value = arg.partition("=")
            value = value if equals else next(rest, None)
            if (name, value) not in (("--format", "text"), ("--format", "json"), ("--dialect", "pv")):
                return None
            fmt = value if name == "--format" else fmt
        elif arg.startswith("-") or not arg.strip():
            return None  # help, another option, an empty path: click says what it says
        else:
            paths.append(arg)
    from pv.config import ConfigError, load_workspace

    try:
        workspace = load_workspace(Path.cwd())
        if workspace.pyproject is None or not workspace.contracts_dir.is_dir():
            return None
        from pv.validation import expand_paths, render

        if paths:
            files, missing = expand_paths(paths)
            if missing or not files:
                return None
        else:
            files = workspace.contract_files()
        scope = workspace.contract_files()
        if not files:
            return None
        if check:
            from pv.validation import checked_report

            report = checked_report(workspace, files, [], strict, dialect)
        else:
            report = replayed(workspace.root, run_key(workspace, files, scope, options(strict, dialect)))
    except (ConfigError, OSError, ValueError):
        return None
    except Exception:  # noqa: BLE001 - a shortcut that fails is no shortcut: the command runs and says
        return None
    if report is None:
        return None
    _echo(render(report, fmt, quiet))
    return 0 if report.ok else 1


def _echo(text: str) -> None:
    """Print `text` and a newline as click.echo does. For ASCII without escape sequences that
    is writing it to stdout; anything else (click strips ANSI codes from a stream that is not a
    terminal, and mends encodings) goes through click.echo itself. A closed pipe ends `pv` as
    click's command line ends it."""
    try:
        if text.isascii() and "\x1b" not in text:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        else:
            import click

            click.echo(text)
    except BrokenPipeError:  # what click's command line does then: quiet flushes at exit, status 1
        import click.utils

        pacify = getattr(click.utils, "_PacifyFlushWrapper", None) or click.utils.PacifyFlushWrapper
        sys.stdout, sys.stderr = pacify(sys.stdout), pacify(sys.stderr)
        sys.exit(1)
