"""Atomic file writes: a reader sees the old file or the new one, never half of either.

`durable=False` skips the fsync: after a crash the file may be the old one or empty, never a
mix of two. Only for files whose loss costs a recomputation (pv's caches: pv.cache signs every
file, so an empty or torn one is a miss); an fsync per file was most of a first run's writing."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes(path: Path | str, data: bytes, durable: bool = True) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_text(path: Path | str, text: str, durable: bool = True) -> None:
    write_bytes(path, text.encode("utf-8"), durable)
