"""`pv status --html DIR` (pv.dashboard): the static page, its shrinking-margin flags, and a
target directory that is never half-written or wrongly replaced."""

from __future__ import annotations

import pytest

from dashboard_helpers import SHRINKING, STEADY, planted_workspace
from pv import dashboard
from pv_workspace import cli

status = cli("status")


def test_a_margin_falling_over_ten_commits_is_flagged(tmp_path, monkeypatch):
    planted_workspace(tmp_path, monkeypatch, SHRINKING)
    out = tmp_path / "site"
    result = status("--html", str(out))
    assert result.exit_code == 0, result.output
    assert "(1 margin(s) shrinking toward zero)" in result.output
    page = (out / "index.html").read_text()
    assert page.count('data-flag="shrinking"') == 1
    flagged = page[page.index('data-flag="shrinking"') - 80:]
    assert "FALSIFY-DEMO-001" in flagged[:400]
    assert "margin over 11 commits" in page  # the real record (no commit) + ten planted ones
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert (out / dashboard.MARKER).is_file()
    assert "kill-matrix" in page and "drops_bias" in page and "Mutation scores" in page
    # deterministic: the same evidence writes the same bytes
    assert status("--html", str(out)).exit_code == 0 and (out / "index.html").read_text() == page


def test_a_wobbling_margin_is_not_flagged(tmp_path, monkeypatch):
    planted_workspace(tmp_path, monkeypatch, STEADY)
    out = tmp_path / "site"
    assert status("--html", str(out)).exit_code == 0
    assert 'data-flag="shrinking"' not in (out / "index.html").read_text()


def test_a_non_dashboard_directory_is_refused_and_left_alone(tmp_path, monkeypatch):
    planted_workspace(tmp_path, monkeypatch, STEADY)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    result = status("--html", str(mine))
    assert result.exit_code == 2 and "is not empty and is not a pv dashboard" in result.output
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert status("--html", str(afile)).exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp dirs left


def test_an_unwritable_parent_is_a_clear_error(tmp_path, monkeypatch):
    """The machine refuses the write (a read-only directory; simulated, since root writes
    anywhere): one line naming the directory, exit 1, nothing written."""
    planted_workspace(tmp_path, monkeypatch, STEADY)
    parent = tmp_path / "readonly"
    parent.mkdir()

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(dashboard.tempfile, "mkdtemp", refuse)
    result = status("--html", str(parent / "site"))
    assert result.exit_code == 1 and "cannot write in" in result.output and "Permission denied" in result.output
    assert "Traceback" not in result.output and list(parent.iterdir()) == []


def test_a_failed_write_leaves_the_previous_dashboard(tmp_path, monkeypatch):
    planted_workspace(tmp_path, monkeypatch, STEADY)
    out = tmp_path / "site"
    assert status("--html", str(out)).exit_code == 0
    before = (out / "index.html").read_text()

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dashboard.os, "chmod", broken)
    with pytest.raises(dashboard.DashboardError, match="nothing was changed"):
        dashboard.write(out, {"index.html": "new", dashboard.MARKER: "x"})
    assert (out / "index.html").read_text() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".site")] == []


def test_html_excludes_the_other_modes(tmp_path, monkeypatch):
    planted_workspace(tmp_path, monkeypatch, STEADY)
    result = status("--html", str(tmp_path / "site"), "--check")
    assert result.exit_code == 2 and "cannot be combined" in result.output


def test_section_hooks_render_after_the_built_in_sections(tmp_path, monkeypatch):
    planted_workspace(tmp_path, monkeypatch, STEADY)
    monkeypatch.setattr(dashboard, "SECTION_HOOKS", [lambda report, records: '<section id="extra">X</section>',
                                                     lambda report, records: ""])
    out = tmp_path / "site"
    assert status("--html", str(out)).exit_code == 0
    page = (out / "index.html").read_text()
    assert page.index('id="extra"') > page.index('id="kill-matrix"')


def test_attack_a_record_that_does_not_count_never_lowers_the_shrinking_flag(tmp_path, monkeypatch):
    """The margin falls over ten commits (flagged); then a copy of the last record with margin 2.0
    at a new commit, its test node relabelled (pv.identity refuses it: it decides nothing). It
    broke the fall in the history, so the flag went down while the cell still held by 0.1."""
    import json
    import uuid

    ws = planted_workspace(tmp_path, monkeypatch, SHRINKING)
    last = json.loads(ws.ledger.read_text().splitlines()[-1])
    forged = dict(last, margin=2.0, git_commit="f" * 40, record_id=uuid.uuid4().hex, run_id=uuid.uuid4().hex,
                  observations=dict(last["observations"], val_loss=4.852 - 2.0),
                  test_node=last["test_node"].replace("[cpu]", "[cuda]"))
    with open(ws.ledger, "a") as handle:
        handle.write(json.dumps(forged, sort_keys=True) + "\n")
    out = tmp_path / "site"
    assert status("--html", str(out)).exit_code == 0
    page = (out / "index.html").read_text()
    assert page.count('data-flag="shrinking"') == 1
    assert "margin over 11 commits" in page
