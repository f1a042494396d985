"""What a run reads: the inputs `pv validate` depends on, noted while it checks (pv.replay
stores a run's report with them, and replays it only while every one is unchanged).

While a `Recorder` is active it notes every input the run touches:

* each file opened for reading (Python raises an "open" audit event for every open),
* each directory listed ("os.listdir" / "os.scandir" events: the contracts dir, a mutants
  package, the import system's directory caches),
* each path whose existence or kind was asked (os.stat and os.lstat, wrapped for the run: a
  module that does not exist yet is an input as much as one that does).

Forked workers hand theirs to the parent (`take_noted`, `merge_noted`; pv.validation). After the
run every file read is hashed (sha256, `digest_of_read`); a file that changed while the run read
it makes the run unrecordable. Not inputs: pv's own package, the interpreter's prefix and
site-packages, and pv's caches (`skipped_dirs`): pv.replay's key covers them.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

from pv import cache

_PACKAGE = Path(__file__).resolve().parent
T = TypeVar("T")


def site_dirs() -> list[str]:
    """The installed distributions' directories on sys.path."""
    return [p for p in sys.path if p and os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages")]


def path_kind(path: str, follow: bool) -> str:
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


def listing_digest(path: str) -> str:
    try:
        with os.scandir(path) as entries:
            names = sorted(f"{e.name}\0{e.is_dir(follow_symlinks=False)}" for e in entries if e.name != _CACHE_ROOT)
    except OSError as exc:
        return f"error {exc.errno}"
    return hashlib.sha256("\n".join(names).encode("utf-8", "surrogateescape")).hexdigest()


_DIGEST_MEMO: dict[str, tuple[tuple[int, ...], str]] = {}  # a stored run and its parts share inputs


def file_digest(path: str) -> str | None:
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
    found it (file_digest: while its size, times and inode stay); else of `data`, the bytes read
    then, remembered for file_digest (a file the run hashes anyway is hashed once). None: never
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
_CAPTURES: list[list[tuple[Any, bool]]] = []  # the paths asked while an answer is remembered (asked())


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
        for capture in _CAPTURES:
            capture.append((path, follow_symlinks))
    return _real_stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)


def _lstat(path: Any, *, dir_fd: Any = None) -> os.stat_result:
    if _STACK and dir_fd is None and not _BUSY[0]:
        for recorder in _STACK:
            recorder.note_kind(path, False)
        for capture in _CAPTURES:
            capture.append((path, False))
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
        self._skip = tuple(os.path.normpath(p) + os.sep for p in skipped_dirs(root))
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
            self.kinds[key] = path_kind(absolute, follow)
            self.fresh.append(("kind", key, self.kinds[key]))

    def note_listing(self, path: Any) -> None:
        absolute = self._absolute(path)
        if absolute is None or absolute in self.listings:
            return
        _BUSY[0] = True
        try:
            self.listings[absolute] = listing_digest(absolute)
            self.fresh.append(("listing", absolute, self.listings[absolute]))
        finally:
            _BUSY[0] = False

    def note_known(self, noted: list[tuple[str, str, Any]]) -> None:
        """Kinds another recording of this run asked and found (asked()): inputs of this one too,
        as first found; one found otherwise here means it changed during the run."""
        for what, key, value in noted:
            known = self.kinds.get(key)
            if known is None:
                self.kinds[key] = value
                self.fresh.append((what, key, value))
            elif known != value:
                self.usable = False

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
            digest = file_digest(path)
            try:
                st = _real_stat(path)
                now = (st.st_size, st.st_mtime_ns)
            except OSError:
                now = None
            if digest is None or now != seen:
                return None
            out.append(["file", path, digest])
        return out


def skipped_dirs(root: Path) -> list[str]:
    import sysconfig

    dirs = [str(_PACKAGE), str(Path(root) / cache.CACHE_DIR), str(cache.secret_path().parent),
            sys.prefix, sys.base_prefix, sys.exec_prefix, "/proc", "/dev", "/sys"]
    dirs += [sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    dirs += site_dirs()
    return sorted({os.path.abspath(d) for d in dirs if d})


def asked(answer: Callable[[], T]) -> tuple[T, list[tuple[str, str, Any]]]:
    """answer(), and the path kinds it asked as the innermost recording noted them: an answer
    remembered for the rest of the run is replayed with note_asked(them), so that every
    recording that uses it has its inputs (pv.codeunits remembers where modules resolve)."""
    capture: list[tuple[Any, bool]] = []
    _CAPTURES.append(capture)
    try:
        result = answer()
    finally:
        _CAPTURES.remove(capture)
    noted: list[tuple[str, str, Any]] = []
    if _STACK:
        inner = _STACK[-1]
        for path, follow in capture:
            absolute = inner._absolute(path)
            key = f"{'stat' if follow else 'lstat'}:{absolute}"
            if absolute is not None and key in inner.kinds:
                noted.append(("kind", key, inner.kinds[key]))
    return result, noted


def note_asked(noted: list[tuple[str, str, Any]]) -> None:
    """What asked() returned, noted by every recording under way."""
    for recorder in _STACK:
        recorder.note_known(noted)


def start(root: Path, extra_files: list[Path]) -> Recorder | None:
    """Begin recording (None: replay is off). A recording started inside another is a part of
    it: what the part reads, the whole run read too."""
    if not cache.enabled():
        return None
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED.append(True)
    _forget_unseen_probes(outermost=not _STACK)
    recorder = Recorder(root, extra_files)
    for outer in _STACK:
        outer.merge(recorder.take_all())
    _STACK.append(recorder)
    os.stat, os.lstat = _stat, _lstat
    return recorder


def _forget_unseen_probes(outermost: bool = True) -> None:
    """In-process memories that answer a file-system question without asking it again: a
    recording in a long-lived process (an in-process caller, a test session) must see every
    question its run depends on, so they are forgotten first. (A `pv` process starts empty.)
    Answers remembered with what they asked (asked()) are replayed into every recording of the
    run, so they are forgotten only when a new run begins."""
    import importlib

    importlib.invalidate_caches()  # the import system's directory listings (codebind asks it)
    memories = [("pv.codebind", "_imports_cached"), ("pv.crosscheck", "_schema_targets")]
    if outermost:
        memories += [("pv.codeunits", "_RESOLVED"), ("pv.codeunits", "_REAL_PATHS")]
    for module, name in memories:
        memory = getattr(sys.modules.get(module), name, None)
        clear = getattr(memory, "cache_clear", None) or getattr(memory, "clear", None)
        if clear is not None:
            clear()


def active() -> list[Recorder]:
    """The recordings under way, outermost first."""
    return list(_STACK)


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
