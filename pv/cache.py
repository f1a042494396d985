"""A small persistent cache of work that is decided by the bytes it was computed from.

`pv validate` recomputes the same facts on every run: the syntax-tree digest of every bound
module (pv.codebind), the mutant names and check signatures of modules (pv.staticcheck), what
the file-local checks find in an unchanged contract (pv.crosscheck). Each fact is a pure
function of some bytes, so it is stored under the
sha256 of those bytes (plus the version of the code that computes it): an edit changes the key,
and a stale entry can never be read back as current. A cache is only ever a shortcut to the
answer the computation gives; remove the directory and every answer stays the same.

Where: `<workspace root>/.pv-cache/pv/<name>.json` (JSON only: nothing in it is ever executed),
written atomically (pv.atomic), with a `.gitignore` of `*` beside it so it is never committed.
Reads and writes are best effort: an unreadable, corrupt or unwritable cache is a miss, never an
error. `PV_NO_CACHE=1` turns every cache off (each run recomputes everything).

A cache is an input too: a file in the workspace could have been written by anyone (a cloned
repository can ship a `.pv-cache/`), and a keyed entry only proves which bytes it claims to be
about, not that pv computed its answer. So every cache file is signed: its first line is an
HMAC-SHA256 of the rest under a per-user secret kept outside every repository
(`$XDG_CACHE_HOME/pv/cache-key`, default `~/.cache/pv/cache-key`, created once, mode 0600). A
file whose signature does not verify (forged, truncated, edited, signed on another account) is
a miss; where no secret can be read or made, nothing is cached at all.

Other checks can keep their own decided facts here (e.g. a solver's verdict on a prediction,
keyed by the prediction's text and the solver's version): `Cache(root, "name", version)`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

CACHE_DIR = Path(".pv-cache") / "pv"
# Entries kept beyond those used in this run, so runs of different verbs do not evict each other.
MAX_ENTRIES = 20_000


SIGNATURE_PREFIX = b"pv-cache-hmac-sha256 "
SECRET_BYTES = 32


def enabled() -> bool:
    return os.environ.get("PV_NO_CACHE", "") in ("", "0") and secret() is not None


def secret_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pv" / "cache-key"


_SECRETS: dict[tuple[str | None, str | None], bytes | None] = {}  # per (XDG_CACHE_HOME, HOME)


def secret() -> bytes | None:
    """The per-user key that signs cache files, made on first use (None: none can be had, so
    nothing is cached). Created under a temporary name and linked into place, so two processes
    starting at once agree on one key and none ever reads a half-written one."""
    where = (os.environ.get("XDG_CACHE_HOME"), os.environ.get("HOME"))  # what secret_path() reads, cheaply
    if where in _SECRETS:
        return _SECRETS[where]
    path = secret_path()
    key = _read_secret(path)
    if key is None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            temporary = path.with_name(f".{path.name}.{os.getpid()}")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, os.urandom(SECRET_BYTES).hex().encode())
            finally:
                os.close(fd)
            try:
                os.link(temporary, path)  # fails if another process made it first: use theirs
            except FileExistsError:
                pass
            finally:
                os.unlink(temporary)
        except OSError:
            pass
        key = _read_secret(path)
    _SECRETS[where] = key
    return key


def _read_secret(path: Path) -> bytes | None:
    try:
        data = path.read_bytes().strip()
    except OSError:
        return None
    return data if len(data) == 2 * SECRET_BYTES else None


def sign(body: bytes) -> bytes | None:
    """The file text for `body`: a signature line, then the body (None: no secret)."""
    key = secret()
    if key is None:
        return None
    return SIGNATURE_PREFIX + hmac.new(key, body, hashlib.sha256).hexdigest().encode() + b"\n" + body


def verified(data: bytes) -> bytes | None:
    """The body of a signed file if its signature is this user's, else None."""
    key = secret()
    head, newline, body = data.partition(b"\n")
    if key is None or not newline or not head.startswith(SIGNATURE_PREFIX):
        return None
    expected = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
    return body if hmac.compare_digest(head[len(SIGNATURE_PREFIX):], expected) else None


_SOURCE_DIGEST: list[str] = []


def pv_source_digest() -> str:
    """sha256 of pv's own Python source: a fact computed by pv's checks is remembered only for
    the pv that computed it (any edit to pv, an upgrade, a branch switch: recomputed)."""
    if not _SOURCE_DIGEST:
        package = Path(__file__).resolve().parent
        h = hashlib.sha256()
        for path in sorted(package.rglob("*.py")):
            h.update(str(path.relative_to(package)).encode() + b"\0")
            try:
                h.update(path.read_bytes())
            except OSError:
                h.update(b"unreadable")
        _SOURCE_DIGEST.append(h.hexdigest())
    return _SOURCE_DIGEST[0]


def _normalized(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "_", name).lower()


def installed_version(distribution: str) -> str:
    """An installed distribution's version ("absent" when it is not installed), read from its
    metadata without importing it: a fact a third-party solver decided is remembered only for
    the version that decided it.

    Where a wheel installed it, the version is the one in its `<name>-<version>.dist-info`
    folder's name, found in the first search path entry that holds the distribution (as
    importlib.metadata finds it; asking importlib.metadata was a twentieth of checking a run
    after an edit); anything else there (an egg, two versions) is asked of importlib.metadata."""
    wanted = _normalized(distribution)
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found = [n for n in names if _normalized(n.partition("-")[0]) == wanted and "-" in n
                 and n.endswith((".dist-info", ".egg-info", ".egg"))]
        if found:
            version = found[0][: -len(".dist-info")].partition("-")[2]
            if len(found) == 1 and found[0].endswith(".dist-info") and version and "-" not in version:
                return version
            break
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "absent"


def key_of(*parts: bytes | str) -> str:
    """A key for bytes (and whatever else decides the answer): sha256, length-prefixed parts."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


class Cache:
    """key -> JSON value, loaded on first use, saved by `save()` when something was added.

    `version` names the computation (its algorithm and the Python that parses): a file written
    under another version is ignored whole."""

    def __init__(self, root: Path | str, name: str, version: str | Callable[[], str]):
        self.path = Path(root) / CACHE_DIR / f"{name}.json"
        self._version = version  # a callable is asked only when the cache is on (PV_NO_CACHE=1 reads nothing)
        self._entries: dict[str, Any] | None = None
        self._used: set[str] = set()
        self._added: dict[str, Any] = {}  # put by this process since it last saved or handed them over

    @property
    def active(self) -> bool:
        """Off (PV_NO_CACHE=1, no secret): get() misses, put() keeps nothing, and a caller may
        skip the work of making a key or an entry."""
        return enabled()

    @property
    def version(self) -> str:
        if callable(self._version):
            self._version = self._version()
        return f"{self._version}|py{sys.version_info[0]}.{sys.version_info[1]}"

    def _read_file(self) -> dict[str, Any]:
        if not self.active:
            return {}
        try:
            body = verified(self.path.read_bytes())
            data = json.loads(body) if body is not None else None
        except (OSError, ValueError, RecursionError):
            return {}
        if isinstance(data, dict) and data.get("version") == self.version and isinstance(data.get("entries"), dict):
            return data["entries"]
        return {}

    def _load(self) -> dict[str, Any]:
        if self._entries is None:
            self._entries = self._read_file()
        return self._entries

    def get(self, key: str) -> Any:
        if not self.active:  # turned off since it was loaded (a store kept for the process)
            return None
        value = self._load().get(key)
        if value is not None:
            self._used.add(key)
        return value

    def put(self, key: str, value: Any) -> None:
        if not self.active:
            return
        entries = self._load()
        self._used.add(key)
        if entries.get(key) != value:
            entries[key] = value
            self._added[key] = value

    def take_added(self) -> dict[str, Any]:
        """The entries put since the last call (a forked worker hands them to its parent)."""
        added, self._added = self._added, {}
        return added

    def merge(self, added: dict[str, Any]) -> None:
        for key, value in added.items():
            self.put(key, value)

    def save(self) -> None:
        """Write what this process added, merged into what is on disk now (other processes may
        have saved since this one loaded), under a lock, atomically. Any failure is ignored."""
        if not (self._added and self.active):
            return
        try:
            import fcntl

            from pv.atomic import write_bytes, write_text

            self.path.parent.mkdir(parents=True, exist_ok=True)
            ignore = self.path.parent / ".gitignore"
            if not ignore.exists():
                write_text(ignore, "# pv's cache of decided facts (pv/cache.py); safe to delete\n*\n", durable=False)
            with open(self.path.parent / f".{self.path.name}.lock", "a") as lock:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
                entries = {**self._read_file(), **self._added}
                if len(entries) > MAX_ENTRIES:
                    entries = {k: v for k, v in entries.items() if k in self._used}
                signed = sign(json.dumps({"version": self.version, "entries": entries},
                                          separators=(",", ":"), sort_keys=True).encode())
                if signed is None:
                    return
                write_bytes(self.path, signed, durable=False)
            self._entries = entries
            self._added = {}
        except OSError:
            pass
