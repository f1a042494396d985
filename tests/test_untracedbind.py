"""pv.untracedbind's static reading of planted bugs (the records it makes: tests/test_timing.py)."""

from __future__ import annotations

from pv.untracedbind import planted_units

SOURCE = b'''\
import contextlib

from pv import mutation
from pv.mutation import mutant


@mutant("first_bug")
def first():
    def inner():
        pass
    yield


@mutation.mutant(name="second_bug", runtimes="pvlab")
def second():
    yield


if FLAG:
    @mutant("third_bug")
    def third():
        yield
else:
    def third():  # the same unit, not a bug in this branch: bound
        yield


@contextlib.contextmanager
def machinery():
    yield


@mutant(NAME)
def unnamed():  # a name pv cannot read statically is no bug it can leave out
    yield
'''


def test_the_bugs_a_module_declares_are_read_as_pv_validate_reads_them():
    names, functions = planted_units(SOURCE)
    assert names == {"first_bug", "second_bug", "third_bug"}
    assert functions == {"first", "second"}


def test_a_module_that_does_not_parse_declares_no_bug():
    assert planted_units(b"def broken(:\n") == (frozenset(), frozenset())
