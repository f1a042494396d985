"""Replaying `pv validate`: the report of a run whose every input is unchanged, without checking again.

A validation run is a function of what it reads. So while `pv validate` checks, a `Recorder`
notes every input the run touches:

* each file opened for reading (Python raises an "open" audit event for every open),
* each directory listed ("os.listdir" / "os.scandir" events: the contracts dir, a mutants
  package, the import system's directory caches),
* each path whose existence or kind was asked (os.stat and os.lstat, wrapped for the run: a
  module that does not exist yet is an input as much as one that does).

Forked workers hand theirs to the parent (pv.validation). After the run every file read is
hashed (sha256); a file that changed while the run read it makes the run unrecordable. The
report is stored with that list of inputs under a key of what is not a file read: pv's own
files (by content), the interpreter, its sys.path and the installed distributions (by name and
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
import stat
import sys
from pathlib import Path
from typing import Any

from pv import cache

REPLAY_VERSION = "validate-replay-1"
RUNS_DIR = cache.CACHE_DIR / "validate-runs"
PARTS_DIR = cache.CACHE_DIR / "validate-parts"
MAX_RUNS = 64  # stored runs kept: one per key (the whole dir, each set of files a hook passed)
MAX_PARTS = 20_000  # stored parts kept: one per contract's bytes (old versions of a contract age out)
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


def _site_dirs() -> list[str]:
    return [p for p in sys.path if p and os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages")]


def environment() -> str:
    """The interpreter, its module search path and its installed distributions (a
    distribution's metadata folder is made anew by every install, upgrade or reinstall).
    Taken once per process and search path: a run and its parts are judged in one environment."""
    memo = f"environment {sys.path!r}"
    if memo in _DIGESTS:
        return _DIGESTS[memo]
    parts = [sys.version, sys.executable, sys.platform, repr(sys.path), repr(tuple(sys.flags))]
    for directory in _site_dirs():
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


# --- recording -------------------------------------------------------------------------------


def _kind(path: str, follow: bool) -> str:
    try:
        mode = (_real_stat(path) if follow else _real_lstat(path)).st_mode
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "not-a-directory"
    except OSError as exc:
        return f"error {exc.errno}"
    return {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "link"}.get(stat.S_IFMT(mode), "other")


_CACHE_ROOT = cache.CACHE_DIR.parts[0]  # made by the run itself: never an input


def _listing(path: str) -> str:
    try:
        with os.scandir(path) as entries:
            names = sorted(f"{e.name}\0{e.is_dir(follow_symlinks=False)}" for e in entries if e.name != _CACHE_ROOT)
    except OSError as exc:
        return f"error {exc.errno}"
    return hashlib.sha256("\n".join(names).encode("utf-8", "surrogateescape")).hexdigest()


_DIGEST_MEMO: dict[str, tuple[tuple[int, ...], str]] = {}  # a stored run and its parts share inputs


def _file_digest(path: str) -> str | None:
    """sha256 of the file, hashed once per process while its size, times and inode stay."""
    try:
        with open(path, "rb") as handle:
            st = os.fstat(handle.fileno())
            seen = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
            memo = _DIGEST_MEMO.get(path)
            if memo is not None and memo[0] == seen:
                return memo[1]
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None
    _DIGEST_MEMO[path] = (seen, digest)
    return digest


def digest_of_read(path: str, st: os.stat_result, data: bytes | None = None) -> str | None:
    """sha256 of `path` while it was `st` (fstat of a handle a caller reads), as this process
    found it (_file_digest: while its size, times and inode stay); else of `data`, the bytes read
    then, remembered for _file_digest (a file the run hashes anyway is hashed once). None: never
    hashed here and no `data`."""
    absolute = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    seen = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
    memo = _DIGEST_MEMO.get(absolute)
    if memo is not None and memo[0] == seen and (data is None or len(data) == st.st_size):
        return memo[1]
    if data is None:
        return None
    digest = hashlib.sha256(data).hexdigest()
    if st.st_size == len(data):
        _DIGEST_MEMO[absolute] = (seen, digest)
    return digest


_real_stat = os.stat
_real_lstat = os.lstat
_STACK: list["Recorder"] = []  # the recordings under way, outermost first (a part of a run nests)
_BUSY: list[bool] = [False]  # a recorder is asking the file system itself: not an input of the run
_HOOKED: list[bool] = []
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _audit(event: str, args: tuple) -> None:
    if not _STACK or _BUSY[0]:
        return
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        writes = (any(c in mode for c in "wax+") if isinstance(mode, str)
                  else isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
        if not writes:
            for recorder in _STACK:
                recorder.note_read(path)
    elif event in ("os.listdir", "os.scandir"):
        for recorder in _STACK:
            recorder.note_listing(args[0] if args else None)


def _stat(path: Any, *, dir_fd: Any = None, follow_symlinks: bool = True) -> os.stat_result:
    if _STACK and dir_fd is None and not _BUSY[0]:
        for recorder in _STACK:
            recorder.note_kind(path, follow_symlinks)
    return _real_stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)


def _lstat(path: Any, *, dir_fd: Any = None) -> os.stat_result:
    if _STACK and dir_fd is None and not _BUSY[0]:
        for recorder in _STACK:
            recorder.note_kind(path, False)
    return _real_lstat(path, dir_fd=dir_fd)


class Recorder:
    """The inputs of one validation run (see the module docstring). `usable` is False when the
    run cannot be recorded faithfully (nothing is stored then)."""

    def __init__(self, root: Path, extra_files: list[Path]):
        self.usable = True
        self.files: dict[str, tuple[int, int] | None] = {}  # path -> (size, mtime_ns) when first read
        self.kinds: dict[str, str] = {}  # "stat:/p" or "lstat:/p" -> kind
        self.listings: dict[str, str] = {}  # directory -> digest of its names
        self.fresh: list[tuple[str, str, Any]] = []  # noted since the last take() (a worker's share)
        self._cwd = os.getcwd()
        self._seen: dict[str, str | None] = {}  # path as given -> as recorded (most are asked often)
        self._skip = tuple(os.path.normpath(p) + os.sep for p in _skipped_dirs(root))
        root_dir = os.path.normpath(os.path.abspath(root)) + os.sep
        if any(root_dir.startswith(p) for p in self._skip):
            self.usable = False  # the workspace inside a skipped tree: its reads would go unseen
        for path in extra_files:
            self.note_read(str(path))

    def _absolute(self, path: Any) -> str | None:
        """The path as recorded (absolute, not normalized: `a/../b` is what the OS resolved),
        or None for a descriptor or a path under a skipped tree."""
        if path is None:
            return self._cwd
        if isinstance(path, int):
            return None
        try:
            text = os.fsdecode(os.fspath(path))
        except TypeError:
            return None
        known = self._seen.get(text, False)
        if known is not False:
            return known
        absolute = text if os.path.isabs(text) else os.path.join(self._cwd, text)
        if (os.path.normpath(absolute) + os.sep).startswith(self._skip):
            absolute = None
        self._seen[text] = absolute
        return absolute

    def note_read(self, path: Any) -> None:
        absolute = self._absolute(path)
        if absolute is None or absolute in self.files:
            return
        _BUSY[0] = True
        try:
            try:
                st = _real_stat(absolute)
                seen = (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None
            except OSError:
                seen = None
            if seen is None:  # missing, a directory, a device: its kind is the input
                self._put_kind(absolute, True)
            else:
                self.files[absolute] = seen
                self.fresh.append(("file", absolute, seen))
        finally:
            _BUSY[0] = False

    def note_kind(self, path: Any, follow: bool) -> None:
        absolute = self._absolute(path)
        if absolute is not None and f"{'stat' if follow else 'lstat'}:{absolute}" not in self.kinds:
            _BUSY[0] = True
            try:
                self._put_kind(absolute, follow)
            finally:
                _BUSY[0] = False

    def _put_kind(self, absolute: str, follow: bool) -> None:
        key = f"{'stat' if follow else 'lstat'}:{absolute}"
        if key not in self.kinds:
            self.kinds[key] = _kind(absolute, follow)
            self.fresh.append(("kind", key, self.kinds[key]))

    def note_listing(self, path: Any) -> None:
        absolute = self._absolute(path)
        if absolute is None or absolute in self.listings:
            return
        _BUSY[0] = True
        try:
            self.listings[absolute] = _listing(absolute)
            self.fresh.append(("listing", absolute, self.listings[absolute]))
        finally:
            _BUSY[0] = False

    def take_all(self) -> list[tuple[str, str, Any]]:
        """Everything noted so far (what a part's recorder was given before it began)."""
        return ([("file", k, v) for k, v in self.files.items()]
                + [("kind", k, v) for k, v in self.kinds.items()]
                + [("listing", k, v) for k, v in self.listings.items()])

    def take(self) -> list[tuple[str, str, Any]]:
        fresh, self.fresh = self.fresh, []
        return fresh

    def merge(self, noted: list[tuple[str, str, Any]]) -> None:
        for what, key, value in noted:
            table = {"file": self.files, "kind": self.kinds, "listing": self.listings}[what]
            if key in table and table[key] != value:
                self.usable = False  # a worker saw it otherwise: it changed during the run
            table.setdefault(key, value)

    def inputs(self) -> list[list[str]] | None:
        """[[what, path, value]] for every input, files hashed now; None if one changed while
        the run read it."""
        out = [["kind", key, value] for key, value in sorted(self.kinds.items())]
        out += [["listing", path, value] for path, value in sorted(self.listings.items())]
        for path, seen in sorted(self.files.items()):
            digest = _file_digest(path)
            try:
                st = _real_stat(path)
                now = (st.st_size, st.st_mtime_ns)
            except OSError:
                now = None
            if digest is None or now != seen:
                return None
            out.append(["file", path, digest])
        return out


def _skipped_dirs(root: Path) -> list[str]:
    import sysconfig

    dirs = [str(_PACKAGE), str(Path(root) / cache.CACHE_DIR), str(cache.secret_path().parent),
            sys.prefix, sys.base_prefix, sys.exec_prefix, "/proc", "/dev", "/sys"]
    dirs += [sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    dirs += _site_dirs()
    return sorted({os.path.abspath(d) for d in dirs if d})


def start(root: Path, extra_files: list[Path]) -> Recorder | None:
    """Begin recording (None: replay is off). A recording started inside another is a part of
    it: what the part reads, the whole run read too."""
    if not cache.enabled():
        return None
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED.append(True)
    _forget_unseen_probes()
    recorder = Recorder(root, extra_files)
    for outer in _STACK:
        outer.merge(recorder.take_all())
    _STACK.append(recorder)
    os.stat, os.lstat = _stat, _lstat
    return recorder


def _forget_unseen_probes() -> None:
    """In-process memories that answer a file-system question without asking it again: a
    recording in a long-lived process (an in-process caller, a test session) must see every
    question its run depends on, so they are forgotten first. (A `pv` process starts empty.)"""
    import importlib

    importlib.invalidate_caches()  # the import system's directory listings (codebind asks it)
    for module, name in (("pv.codebind", "_imports_cached"), ("pv.crosscheck", "_schema_targets")):
        memory = getattr(sys.modules.get(module), name, None)
        clear = getattr(memory, "cache_clear", None) or getattr(memory, "clear", None)
        if clear is not None:
            clear()


def stop(recorder: Recorder | None) -> None:
    if recorder is not None and recorder in _STACK:
        _STACK.remove(recorder)
        if not _STACK:
            os.stat, os.lstat = _real_stat, _real_lstat


def take_noted() -> list[tuple[str, str, Any]]:
    """What this (forked worker) process noted since it last handed its inputs over."""
    return _STACK[0].take() if _STACK else []


def merge_noted(noted: list[tuple[str, str, Any]]) -> None:
    for recorder in _STACK:
        recorder.merge(noted)


# --- storing and replaying -------------------------------------------------------------------


def _run_file(root: Path, key: str, where: Path = RUNS_DIR) -> Path:
    return Path(root) / where / f"{key}.json"


def _write(path: Path, key: str, recorder: Recorder | None, payload: dict[str, Any], keep: int | None = None) -> None:
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


def store(root: Path, key: str, recorder: Recorder | None, report: Any) -> None:
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
        return _kind(path, follow == "stat")
    return _listing(where) if what == "listing" else _file_digest(where) if what == "file" else None


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


def part_key(kind: str, workspace: Any, loaded: Any) -> str:
    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith("PV_"))
    return cache.key_of(REPLAY_VERSION, "part", kind, package_digest(), environment(), repr(settings), os.getcwd(),
                        repr(workspace), loaded.display_path, os.path.abspath(loaded.path), loaded.sha256)


def store_part(root: Path, key: str, recorder: Recorder | None, diagnostics: list[Any]) -> None:
    if not any(d.code == "PV199" for d in diagnostics):
        _write(_run_file(root, key, PARTS_DIR), key, recorder, {"diagnostics": [d.to_json() for d in diagnostics]},
               MAX_PARTS)


def replayed_parts(root: Path, keys: list[str]) -> list[list[Any] | None]:
    """replayed_part of each key, every input shared by several parts looked at once."""
    seen: dict[tuple[str, str], str | None] = {}
    return [replayed_part(root, key, seen) for key in keys]


def replayed_part(root: Path, key: str, seen: dict[tuple[str, str], str | None] | None = None) -> list[Any] | None:
    """A part's stored diagnostics when its every input is unchanged (those inputs become inputs
    of the run under way), else None. `seen`: see unchanged()."""
    data = _read(_run_file(root, key, PARTS_DIR), key, seen)
    if data is None:
        return None
    try:
        found = _diagnostics(data["diagnostics"])
    except (KeyError, TypeError, ValueError):
        return None
    for recorder in _STACK:
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


def fast_validate(args: list[str]) -> int | None:
    """`pv validate ARGS` answered from a stored run, before click (or anything that checks) is
    imported: the exit status, the report printed. None when the arguments are anything but
    the plain ones or nothing is stored for this run: the command runs as usual."""
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
        report = replayed(workspace.root, run_key(workspace, files, scope, options(strict, dialect)))
    except (ConfigError, OSError, ValueError):
        return None
    except Exception:  # noqa: BLE001 - a shortcut that fails is no shortcut: the command runs and says
        return None
    if report is None:
        return None
    sys.stdout.write(render(report, fmt, quiet) + "\n")
    sys.stdout.flush()
    return 0 if report.ok else 1
