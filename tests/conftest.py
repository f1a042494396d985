"""Shared fixtures for pv's own tests. Keep this small: a test file's own helpers live in it or
in a helper module with a unique name (tests/pv_validate_ws.py, tests/pv_workspace.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pv_validate_ws import VWorkspace, make_vworkspace


@pytest.fixture
def vworkspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> VWorkspace:
    """A throw-away workspace for `pv validate` (see tests/pv_validate_ws.py), as the cwd."""
    return make_vworkspace(tmp_path, monkeypatch)
