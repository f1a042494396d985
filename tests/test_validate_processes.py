"""`pv validate` across processes and runs: parallel workers report exactly what one process
does, files pv remembers are checked in one process, a first run writes each cache file once, a
process that ends without teardown keeps what the run built."""

from __future__ import annotations

import os
from pathlib import Path

from pv_validate_ws import codes, other_contract


def test_parallel_workers_report_exactly_what_one_process_does(vworkspace, monkeypatch):
    """Many files are checked in forked workers; positions needed afterwards (duplicate ids,
    cycles) come from re-composing the text, and must match."""
    path, text = vworkspace.contract(("depends_on: []", "depends_on: [demo-other]"))
    other_contract(vworkspace, "demo-other", ("depends_on: []", "depends_on: [demo-forward]"),
                   ("status: DRAFT", "status: DONE"))
    vworkspace.write("contracts/demo-copy-v1.yaml", text.replace("id: demo-forward", "id: demo-copy")
                     .replace("    prediction:", "    predicton:"))
    vworkspace.write("contracts/merge-v1.yaml", "a: &a {x: 1}\nb: {<<: *a, y: 2, y: 3}\n")
    vworkspace.write("contracts/empty-v1.yaml", "")
    monkeypatch.setenv("PV_JOBS", "1")
    serial = vworkspace.run()
    monkeypatch.setenv("PV_JOBS", "2")
    parallel = vworkspace.run()
    assert serial.exit_code == parallel.exit_code == 1
    assert parallel.output == serial.output
    assert {"PV302", "PV303", "PV307", "PV201", "PV204", "PV205", "PV106"} <= codes(parallel)


def test_jobs_for(monkeypatch):
    from pv.validation import PARALLEL_MIN_FILES, jobs_for

    monkeypatch.delenv("PV_JOBS", raising=False)
    assert jobs_for(3) == 1 and jobs_for(PARALLEL_MIN_FILES - 1) == 1
    assert 1 <= jobs_for(10_000) <= 8




def test_files_pv_remembers_are_checked_in_one_process_and_the_rest_in_workers(vworkspace, monkeypatch, tmp_path):
    """After an edit among many files nearly every file's YAML is remembered, so forking workers
    costs more than it saves; a first run, a run with the caches off and a set with more than
    one file in ten changed keep the workers (an explicit PV_JOBS is always obeyed)."""
    from pv import crosscheck
    from pv.config import load_workspace
    from pv.validation import _mostly_remembered, display

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache-home"))
    monkeypatch.delenv("PV_NO_CACHE", raising=False)
    paths = [vworkspace.contract(("id: demo-forward", f"id: demo-{n}"), name=f"demo-{n}-v1.yaml")[0]
             for n in range(10)]

    def remembered() -> bool:
        ctx = crosscheck.Context(load_workspace())
        return _mostly_remembered([(p, p, display(p), True) for p in sorted(paths)], ctx)

    assert not remembered()  # nothing read yet
    vworkspace.run()
    assert remembered()
    paths[0].write_text(paths[0].read_text() + "# edited\n")
    assert remembered()  # 9 of 10
    paths[1].write_text(paths[1].read_text() + "# edited\n")
    assert not remembered()  # 8 of 10
    vworkspace.run()
    monkeypatch.setenv("PV_NO_CACHE", "1")
    assert not remembered()


def test_a_first_run_writes_each_cache_file_once(vworkspace, monkeypatch):
    """A run on empty caches writes each of pv's cache files once (the stored run and each
    contract's PV501 share are files of their own), never once per fact or per contract."""
    from pv import atomic

    for n in (1, 2, 3):
        vworkspace.contract(("id: demo-forward", f"id: demo-{n}"), ("status: DRAFT", "status: ACTIVE_RUNTIME"),
                            ("DEMO-BND-001", f"DEMO-BND-00{n}"), ("FALSIFY-DEMO-FORWARD-001", f"FALSIFY-DEMO-{n}00-001"),
                            ("FALSIFY-DEMO-FORWARD-001", f"FALSIFY-DEMO-{n}00-001"), name=f"demo-{n}-v1.yaml")
    written: list[tuple[str, bool]] = []
    real = atomic.write_bytes

    def counting(path, data, durable=True):
        written.append((os.path.relpath(path, vworkspace.root), durable))
        return real(path, data, durable)

    monkeypatch.setattr(atomic, "write_bytes", counting)
    result = vworkspace.run()
    assert result.output.count("PV501") == 3, result.output
    names = [name for name, _ in written]
    assert len(names) == len(set(names)), names
    assert not any(durable for _, durable in written)  # a cache is never worth an fsync
    assert "falsifiers" not in " ".join(names) and any("module-facts" in n for n in names), names


def test_a_process_that_ends_without_teardown_keeps_what_the_run_built(vworkspace, monkeypatch):
    """pv.validation.KEPT (set by `pv validate` itself, which ends with os._exit): the run's
    structures are kept there instead of freed one by one, and the report is the same."""
    import gc

    from pv import validation
    from pv.config import load_workspace

    vworkspace.contract(("status: DRAFT", "status: ACTIVE_RUNTIME"))  # PV501 judges it (no ledger: no evidence)
    monkeypatch.setenv("PV_NO_CACHE", "1")
    monkeypatch.setenv("PV_JOBS", "1")
    ws = load_workspace(Path.cwd())
    freed = validation.checked_report(ws, ws.contract_files(), [], None, "pv")
    monkeypatch.setattr(validation, "KEPT", [])
    try:
        kept = validation.checked_report(ws, ws.contract_files(), [], None, "pv")
    finally:
        gc.unfreeze()
    assert validation.render(kept) == validation.render(freed)
    assert "PV501" in validation.render(kept) and kept.loaded == {}
    assert any(isinstance(part, dict) and len(part) == 1 for built in validation.KEPT for part in built)  # the loaded files
