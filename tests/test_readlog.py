"""pv.readlog: an answer remembered for the rest of a recorded run brings the path kinds it
asked into every recording that uses it (asked, note_asked). The recorder itself is tested with
the replay it serves (tests/test_replay.py)."""

from __future__ import annotations

from pv import readlog


def _kinds(recorder) -> dict:
    return {where: value for what, where, value in recorder.inputs() if what == "kind"}


def test_an_answer_brings_what_it_asked_into_a_later_recording(tmp_path):
    (tmp_path / "here.py").write_text("x")
    run = readlog.start(tmp_path, [])
    try:
        first = readlog.start(tmp_path, [])  # a part of the run
        try:
            answer, noted = readlog.asked(lambda: [(tmp_path / n).is_file() for n in ("here.py", "absent.py")])
        finally:
            readlog.stop(first)
        assert answer == [True, False]
        assert sorted(noted) == [("kind", f"stat:{tmp_path / 'absent.py'}", "missing"),
                                 ("kind", f"stat:{tmp_path / 'here.py'}", "file")]
        second = readlog.start(tmp_path, [])  # another part: it asks nothing, the answer is replayed
        try:
            readlog.note_asked(noted)
        finally:
            readlog.stop(second)
    finally:
        readlog.stop(run)
    assert _kinds(second) == _kinds(first) == {f"stat:{tmp_path / 'absent.py'}": "missing",
                                               f"stat:{tmp_path / 'here.py'}": "file"}
    assert second.usable and run.usable


def test_a_path_asked_twice_is_noted_for_each_answer_that_asked_it(tmp_path):
    run = readlog.start(tmp_path, [])
    try:
        (tmp_path / "a.py").exists()  # asked before: the recording knows it already
        _, noted = readlog.asked(lambda: (tmp_path / "a.py").exists())
    finally:
        readlog.stop(run)
    assert noted == [("kind", f"stat:{tmp_path / 'a.py'}", "missing")]


def test_a_replayed_kind_found_otherwise_makes_the_run_unrecordable(tmp_path):
    (tmp_path / "a.py").write_text("x")
    run = readlog.start(tmp_path, [])
    try:
        (tmp_path / "a.py").is_file()
        readlog.note_asked([("kind", f"stat:{tmp_path / 'a.py'}", "missing")])  # it changed during the run
    finally:
        readlog.stop(run)
    assert not run.usable


def test_nothing_is_captured_outside_a_recording(tmp_path):
    answer, noted = readlog.asked(lambda: (tmp_path / "a.py").is_file())
    assert (answer, noted) == (False, [])
