"""pv.atomic: a write replaces the file whole; only a durable write pays for an fsync."""

from __future__ import annotations

import os

import pytest

from pv import atomic


@pytest.mark.parametrize("durable", [True, False])
def test_a_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path, monkeypatch, durable):
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    path = tmp_path / "sub" / "f.json"
    atomic.write_bytes(path, b"old", durable=durable)
    os.chmod(path, 0o600)
    atomic.write_text(path, "new", durable=durable)
    assert path.read_bytes() == b"new"
    assert os.stat(path).st_mode & 0o777 == 0o600  # the mode a file had is kept
    assert [p.name for p in path.parent.iterdir()] == ["f.json"]
    assert len(synced) == (2 if durable else 0)


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "f"
    atomic.write_bytes(path, b"old")

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError):
        atomic.write_bytes(path, b"new", durable=False)
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["f"]
