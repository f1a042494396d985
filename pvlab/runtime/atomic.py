"""Atomic writes: a reader sees the old file (or directory) or the new one, never half of either.

The runtime has its own copy rather than importing pv's: the system under test must not depend
on the tool that tests it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator


def write_bytes(path: Path | str, data: bytes) -> None:
    """Write `data` to a temporary file next to `path`, fsync it, then rename it over `path`."""
    write_with(path, lambda temporary: temporary.write_bytes(data))


def write_text(path: Path | str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_with(path: Path | str, writer: Callable[[Path], None]) -> None:
    """Let `writer` produce the file at a temporary path (for libraries that insist on writing
    files themselves, like safetensors), then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(descriptor)
    try:
        writer(Path(temporary))
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def staged_directory(target: Path | str) -> Iterator[Path]:
    """Yield an empty temporary directory beside `target`; on success, publish its files.

    If `target` does not exist, the staged directory is renamed to it in one step, so the
    directory appears complete or not at all. If it exists, each staged file replaces its
    namesake with os.replace (each file atomically; other files in `target` are kept). On
    error the staged directory is removed and `target` is untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    os.chmod(staging, 0o755)  # mkdtemp's 0700 would otherwise become the published directory's mode
    try:
        yield staging
        for item in staging.iterdir():
            with open(item, "rb+") as handle:
                os.fsync(handle.fileno())
        if not target.exists():
            try:
                os.rename(staging, target)
                return
            except OSError:
                if not target.is_dir():  # lost a race to something that is not a directory
                    raise
        # Publish the weights before config.json, so a reader never pairs a new config with
        # old weights of another shape.
        for item in sorted(staging.iterdir(), key=lambda p: p.name == "config.json"):
            os.replace(item, target / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
