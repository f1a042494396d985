"""pv.loadcache: a contract's YAML read back from the cache is exactly what reading it gives."""

from __future__ import annotations

import datetime
import math

from pv import cache
from pv.loadcache import read_yaml_remembered
from pv.safe_yaml import read_yaml

TEXT = """\
# a comment
metadata:
  id: demo
  version: 1.0.0
  on: yes
  when: 2026-11-22
  id: again
numbers: {1: one, 2.5: half, false: f, big: 123456789012345678901234567890, inf: .inf, neg: -0.0}
items: [1, "2", [3, {a: null}], ~]
"""


def _store(root):
    return cache.Cache(root, "yaml-data", "test")


def test_a_remembered_file_reads_back_as_reading_it_gives(tmp_path):
    path = tmp_path / "c-v1.yaml"
    path.write_text(TEXT)
    fresh, fresh_problems = read_yaml(path, "c-v1.yaml")
    store = _store(tmp_path)
    first, first_problems = read_yaml_remembered(path, "c-v1.yaml", store)
    store.save()
    again, again_problems = read_yaml_remembered(path, "c-v1.yaml", _store(tmp_path))
    assert again.node is None, "not read back from the cache"
    assert again.data == fresh.data and again_problems == fresh_problems == first_problems
    assert {"PV205", "PV209"} <= {d.code for d in again_problems}
    numbers = again.data["numbers"]
    assert [type(k) for k in numbers] == [type(k) for k in fresh.data["numbers"]] == [int, float, bool, str, str, str]
    assert math.isinf(numbers["inf"]) and math.copysign(1, numbers["neg"]) == -1
    assert again.data["metadata"]["when"] == datetime.date(2026, 11, 22)
    assert (again.text, again.sha256) == (fresh.text, fresh.sha256)
    assert again.position(("items", 2, 1, "a")) == fresh.position(("items", 2, 1, "a")) == (9, 25)


def test_an_edit_is_read_again(tmp_path):
    path = tmp_path / "c-v1.yaml"
    path.write_text("a: 1\n")
    store = _store(tmp_path)
    read_yaml_remembered(path, "c-v1.yaml", store)
    path.write_text("a: 2\n")
    loaded, _ = read_yaml_remembered(path, "c-v1.yaml", store)
    assert loaded.data == {"a": 2}


def test_refused_and_unrepresentable_files_are_not_remembered(tmp_path):
    store = _store(tmp_path)
    for name, text in (("bad.yaml", "a: [1\n"), ("binary.yaml", "a: !!binary aGVsbG8=\n"), ("empty.yaml", "# nothing\n")):
        path = tmp_path / name
        path.write_text(text)
        assert read_yaml_remembered(path, name, store)[1] == read_yaml(path, name)[1]
    assert store.take_added() == {}  # nothing remembered: each is read (and refused or judged) again
    (tmp_path / "good.yaml").write_text("a: 1\n")
    read_yaml_remembered(tmp_path / "good.yaml", "good.yaml", store)
    assert len(store.take_added()) == 1  # the control: a plain file is remembered


def test_what_is_remembered_reads_back_equal_and_a_nan_is_never_remembered(tmp_path):
    """The encoding is exact by construction (no check by decoding it again at store time): every
    value a YAML file can hold reads back equal and of the same type, and a file holding a NaN,
    which equals nothing, is read again each time instead."""
    store = _store(tmp_path)
    texts = {"kinds.yaml": TEXT, "floats.yaml": "a: [0.1, -0.0, 1e308, .inf, -.inf, 5e-324, 1_000.5]\n",
             "dates.yaml": "d: 2026-02-28\ne: {2026-02-28: day}\n", "strings.yaml": 'a: "\\U0001F600 \\x00 \\u00e9"\n'}
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
        read_yaml_remembered(tmp_path / name, name, store)
    store.save()
    again = _store(tmp_path)
    for name in texts:
        fresh, _ = read_yaml(tmp_path / name, name)
        remembered, _ = read_yaml_remembered(tmp_path / name, name, again)
        assert remembered.node is None, f"{name} was not remembered"
        assert remembered.data == fresh.data and repr(remembered.data) == repr(fresh.data)
    (tmp_path / "nan.yaml").write_text("a: [1, .nan]\n")
    read_yaml_remembered(tmp_path / "nan.yaml", "nan.yaml", again)
    assert again.take_added() == {}


def test_the_data_digest_follows_the_data_not_the_bytes(tmp_path):
    from pv.loadcache import data_digest

    def digest_of(text):
        path = tmp_path / "c-v1.yaml"
        path.write_text(text)
        loaded, _ = read_yaml(path, "c-v1.yaml")
        return data_digest(loaded.data)

    same = digest_of(TEXT)
    assert same is not None
    assert digest_of("# another comment\n" + TEXT + "# and one at the end\n") == same  # comments
    assert digest_of(TEXT.replace("items: [1, ", "items:   [1,  ")) == same  # layout
    # anything the data holds differently: a value, its type, a key's type, the order of keys
    for old, new in (("id: again", "id: other"), ("items: [1,", "items: [1.0,"), ("items: [1,", "items: [true,"),
                     ("items: [1,", "items: ['1',"), ("{1: one", "{'1': one"), ("when: 2026-11-22", "when: '2026-11-22'"),
                     ("on: yes\n  when: 2026-11-22", "when: 2026-11-22\n  on: yes")):
        assert old in TEXT
        assert digest_of(TEXT.replace(old, new)) != same, (old, new)


def test_data_without_an_exact_encoding_has_no_digest():
    from pv.loadcache import data_digest

    assert data_digest({"x": math.nan}) is None
    assert data_digest({"x": {1, 2}}) is None
    assert data_digest({"x": [1, {"y": 2}]}) == data_digest({"x": [1, {"y": 2}]})


def test_a_remembered_file_carries_the_digest_of_its_data(tmp_path):
    from pv.loadcache import data_digest, digest_of_loaded

    path = tmp_path / "c-v1.yaml"
    path.write_text(TEXT)
    store = _store(tmp_path)
    stored, _ = read_yaml_remembered(path, "c-v1.yaml", store)  # read and encoded for the cache
    store.save()
    again, _ = read_yaml_remembered(path, "c-v1.yaml", _store(tmp_path))  # read back from it
    fresh, _ = read_yaml(path, "c-v1.yaml")
    assert fresh.data_sha256 is None  # not read through the cache: computed when asked
    assert stored.data_sha256 == again.data_sha256 == data_digest(fresh.data) == digest_of_loaded(fresh)
    assert digest_of_loaded(again) == again.data_sha256
