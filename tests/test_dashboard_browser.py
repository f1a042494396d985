"""The HTML dashboard rendered by a real browser (headless Chromium): a margin planted to fall
over ten commits is flagged in the DOM after layout, and the flag's colour is in the pixels of
the screenshot; the control (a margin that wobbles) shows neither.

Chromium must be installed: `./dev test` installs Debian's `chromium` when it is missing and it
runs as root with apt-get; anywhere else this test FAILS and says how to install it (a skip is
never a pass)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from dashboard_helpers import SHRINKING, STEADY, count_colour, planted_workspace, read_png
from pv import dashboard
from pv_workspace import cli

FLAG_RGB = tuple(int(dashboard.FLAG_COLOUR[i:i + 2], 16) for i in (1, 3, 5))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--window-size=1280,1000"]


def browser() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("headless Chromium is needed to test the HTML dashboard and is not installed: run "
                "`apt-get install -y chromium` (Debian/Ubuntu, as root; `./dev test` does this itself), or put a "
                "`chromium` binary on PATH", pytrace=False)


def render(page: Path, tmp_path: Path) -> tuple[str, Path]:
    """(the DOM after layout, the screenshot) of file://page."""
    exe = browser()
    shot = tmp_path / "shot.png"
    results = []
    for mode in ("--dump-dom", f"--screenshot={shot}"):
        profile = tempfile.mkdtemp(dir=tmp_path, prefix="chromium-profile-")
        done = subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", mode, page.resolve().as_uri()],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        results.append(done.stdout)
    assert shot.is_file(), "the browser wrote no screenshot"
    return results[0], shot


def dashboard_for(tmp_path: Path, monkeypatch, margins: list[float]) -> Path:
    planted_workspace(tmp_path, monkeypatch, margins)
    out = tmp_path / "site"
    result = cli("status")("--html", str(out))
    assert result.exit_code == 0, result.output
    return out / "index.html"


def test_the_browser_shows_the_shrinking_margin_flagged(tmp_path, monkeypatch):
    dom, shot = render(dashboard_for(tmp_path, monkeypatch, SHRINKING), tmp_path)
    assert '<tr id="row-FALSIFY-DEMO-001-cpu" class="shrinking" data-flag="shrinking">' in dom
    row = dom[dom.index('data-flag="shrinking"'):]
    row = row[:row.index("</tr>")]
    assert "FALSIFY-DEMO-001" in row and "margin shrinking" in row and "<svg" in row
    assert 'id="row-FALSIFY-DEMO-002-cpu">' in dom  # the other falsifier, not flagged
    width, height, pixels = read_png(shot)
    assert (width, height) == (1280, 1000)
    assert count_colour(pixels, FLAG_RGB) > 200, "the flag's colour is not on the screen"


def test_the_browser_shows_no_flag_for_a_wobbling_margin(tmp_path, monkeypatch):
    dom, shot = render(dashboard_for(tmp_path, monkeypatch, STEADY), tmp_path)
    assert 'id="row-FALSIFY-DEMO-001-cpu">' in dom and 'data-flag="shrinking"' not in dom
    _, _, pixels = read_png(shot)
    assert count_colour(pixels, FLAG_RGB) == 0
