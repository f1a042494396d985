"""Lifecycle cells (pv.lifecycle): a falsifier's cells per subject and runtime, ad-hoc cells of path
subjects, and planted bugs judged per cell — built from hand-made records (tests/lifecycle_records.py)."""

from __future__ import annotations

from pv.lifecycle import DeviceState, FalsifierState, MutantState, contract_status
from pv.schema import Contract, LifecycleStatus

from lifecycle_records import PlantedIn, contract, falsifier, rec, subject_rec


def test_discharged_needs_every_subject_on_every_device():
    c = contract(falsifiers=[dict(falsifier(devices=("cpu", "cuda")), subjects=["small", "big"])])
    records = [subject_rec(c, "PASS", s, d) for s in ("small", "big") for d in ("cpu", "cuda")]
    s = contract_status(c, records[:-1], subject_param="checkpoint").falsifiers[0]
    assert s.state is FalsifierState.PARTIAL
    assert [(d.label, d.state.value) for d in s.devices][-1] == ("cuda[big]", "PENDING")
    assert "cuda[big] (PENDING)" in s.explain()
    done = contract_status(c, records, subject_param="checkpoint").falsifiers[0]
    assert done.state is FalsifierState.DISCHARGED
    assert done.device_passed("cpu") and not s.device_passed("cuda")


def test_a_cell_record_for_another_subject_param_is_stale():
    """The cell's hash covers the parameter its subject fills: records made when the subject
    filled another parameter are for another definition."""
    c = contract(falsifiers=[dict(falsifier(), subjects=["small"])])
    s = contract_status(c, [subject_rec(c, "PASS", "small", param="model")], subject_param="checkpoint")
    assert s.falsifiers[0].devices[0].state is DeviceState.STALE


def test_records_without_or_with_other_subjects_never_fill_a_subjects_cell():
    c = contract(falsifiers=[dict(falsifier(), subjects=["small"])])
    records = [subject_rec(c, "PASS", None), subject_rec(c, "PASS", "path:/home/u/ckpt", digest="ab" * 32),
               subject_rec(c, "PASS", "dropped")]
    s = contract_status(c, records, subject_param="checkpoint")
    assert s.falsifiers[0].devices[0].state is DeviceState.PENDING and s.evidence is LifecycleStatus.DRAFT


def test_adhoc_cells_list_path_subjects_per_digest_and_judge_them_by_the_plain_definition():
    from pv.lifecycle import adhoc_cells

    c = contract(falsifiers=[dict(falsifier(), subjects=["small"])])
    records = [subject_rec(c, "PASS", "path:/u/ckpt", digest="a" * 64),
               subject_rec(c, "FAIL", "path:/u/ckpt", digest="b" * 64),
               subject_rec(c, "PASS", "path:/u/ckpt", digest="b" * 64, mutant="m_one"),  # strength: not shown
               subject_rec(c, "PASS", "small")]
    rows = adhoc_cells([c], records)
    assert [(r.subject_digest[0], r.evidence.state.value) for r in rows] == [("a", "PASS"), ("b", "FAIL")]
    stale = records[0].model_copy(update={"falsifier_sha256": "0" * 64})
    assert adhoc_cells([c], [stale])[0].evidence.state is DeviceState.STALE


def test_a_mutant_is_killed_per_subject_cell():
    c = contract(falsifiers=[dict(falsifier(), subjects=["small", "big"])])
    records = [subject_rec(c, "PASS", "big"),  # without the bug: a FAIL under it can show something
               subject_rec(c, "PASS", "small", mutant="m_one"), subject_rec(c, "FAIL", "big", mutant="m_one")]
    m = contract_status(c, records, subject_param="checkpoint").falsifiers[0].mutants[0]
    assert m.state is MutantState.KILLED and [d.label for d in m.devices] == ["cpu[small]", "cpu[big]"]


def test_a_fail_under_a_bug_kills_only_where_the_falsifier_passes_without_it():
    """A check that FAILs on clean code fails under every planted bug: a "kill" there shows
    nothing. The FAIL under the bug counts once the same cell PASSes without it (and stops
    counting when a later clean run of that cell FAILs)."""
    c = contract(falsifiers=[dict(falsifier(), subjects=["small", "big"])])
    killed_on_big = subject_rec(c, "FAIL", "big", mutant="m_one")
    for clean in ([], [subject_rec(c, "FAIL", "big")], [subject_rec(c, "PASS", "small")]):
        m = contract_status(c, [*clean, killed_on_big], subject_param="checkpoint").falsifiers[0].mutants[0]
        assert m.state is MutantState.STALE, clean
        assert "a kill only where the falsifier PASSes without it" in m.devices[0].stale_reason()
    passed = subject_rec(c, "PASS", "big")
    m = contract_status(c, [passed, killed_on_big], subject_param="checkpoint").falsifiers[0].mutants[0]
    assert m.state is MutantState.KILLED
    m = contract_status(c, [passed, killed_on_big, subject_rec(c, "FAIL", "big")],
                        subject_param="checkpoint").falsifiers[0].mutants[0]
    assert m.state is MutantState.STALE


def test_a_record_from_before_subjects_fills_the_cell_whose_hash_it_carries():
    """`params: {checkpoint: small}` moved to `subjects: [small]` keeps the hash, so the old
    record (subject null) is the small cell's evidence; one with another hash fills nothing."""
    c = contract(falsifiers=[dict(falsifier(), subjects=["small", "big"])])
    hand_written = Contract.model_validate({**c.model_dump(mode="json"), "falsification_tests": [
        dict(falsifier(), params={"checkpoint": "small"})]})
    old = rec(hand_written, "PASS")  # subject null, hash of the hand-written params
    s = contract_status(c, [old], subject_param="checkpoint").falsifiers[0]
    assert [(d.label, d.state.value) for d in s.devices] == [("cpu[small]", "PASS"), ("cpu[big]", "PENDING")]
    other = rec(c, "PASS")  # subject null, the plain hash: no cell's
    assert {d.state for d in contract_status(c, [other], subject_param="checkpoint").falsifiers[0].devices} == {
        DeviceState.PENDING}


def test_adhoc_cells_of_one_path_with_and_without_a_digest_sort_without_a_crash():
    # a record without a checkpoint digest (None) sorts before any digest of the same path
    from pv.lifecycle import adhoc_cells

    c = contract(falsifiers=[dict(falsifier(), subjects=["small"])])
    records = [subject_rec(c, "PASS", "path:/u/ckpt", digest="b" * 64), subject_rec(c, "FAIL", "path:/u/ckpt", digest=None)]
    rows = adhoc_cells([c], records)
    assert [(r.subject_digest, r.evidence.state.value) for r in rows] == [(None, "FAIL"), ("b" * 64, "PASS")]


def test_a_bug_is_judged_only_on_the_cells_of_the_runtimes_it_is_planted_in():
    from pv.lifecycle import falsifier_status

    c = contract(falsifiers=[dict(falsifier(mutants=("pvlab_bug", "hf_bug", "liger_bug")),
                                  runtimes=["pvlab", "hf"], check="p.m:f")])
    f = c.falsification_tests[0]
    code = PlantedIn({"hf_bug": ("hf",), "liger_bug": ("liger",)})

    def under(mutant, verdict, runtime):
        record = rec(c, verdict, mutant=mutant)
        return record.model_copy(update={"runtime": runtime})

    clean = [rec(c, "PASS").model_copy(update={"runtime": runtime}) for runtime in ("pvlab", "hf")]

    def states(*records):  # after clean PASSes on both runtimes: a FAIL under a bug can be a kill
        status = falsifier_status(c.metadata.id, f, list(enumerate([*clean, *records])), code)
        return {m.mutant: (m.state, [d.label for d in m.devices]) for m in status.mutants}

    # off-runtime survivors (the pvlab bug passing on hf, the hf bug on pvlab) never lower the count
    got = states(under("pvlab_bug", "FAIL", "pvlab"), under("pvlab_bug", "PASS", "hf"),
                 under("hf_bug", "FAIL", "hf"), under("hf_bug", "PASS", "pvlab"))
    assert got["pvlab_bug"] == (MutantState.KILLED, ["cpu@pvlab"])
    assert got["hf_bug"] == (MutantState.KILLED, ["cpu@hf"])
    # ... and an off-runtime FAIL never raises it: no kill, no survivor, not run
    got = states(under("pvlab_bug", "FAIL", "hf"), under("hf_bug", "FAIL", None))  # None: an old, default-runtime record
    assert got["pvlab_bug"] == (MutantState.NOT_RUN, []) and got["hf_bug"] == (MutantState.NOT_RUN, [])
    # a bug planted in no runtime the falsifier runs on can never be met: NO_CELL, which blocks like a survivor
    assert got["liger_bug"] == (MutantState.NO_CELL, [])
    status = contract_status(c, [under("liger_bug", "FAIL", "liger")], code)
    assert "liger_bug NO_CELL" in " ".join(status.blockers)
