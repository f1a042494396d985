"""The real-text corpus: which files it takes, in what order, its digest, and the split by path."""

from __future__ import annotations

import hashlib
import sysconfig
from pathlib import Path

import pytest

from pvlab.runtime import corpus
from pvlab.runtime.errors import DataError


def _write(root: Path, files: dict[str, bytes | str]) -> Path:
    for relative, content in files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            target.write_text(content, encoding="utf-8")
        else:
            target.write_bytes(content)
    return root


@pytest.fixture
def source_tree(tmp_path) -> Path:
    return _write(tmp_path / "lib", {
        "b.py": "def b():\n    return 2\n",
        "a.py": "def a():\n    return 1\n",
        "pkg/z.py": "Z = 26\n",
        "pkg/__init__.py": "",                                           # empty: skipped
        "site-packages/thirdparty.py": "import numpy\n",                 # not part of the corpus
        "pkg/__pycache__/stale.py": "X = 1\n",
        "encodings/cp999.py": '""" Python Character Mapping Codec cp999 generated from X with gencodec.py.\n"""\n',
        "latin.py": "s = 'caf\xe9'\n".encode("latin-1"),                 # not UTF-8: skipped
        "notes.txt": "not python\n",
    })


def test_reads_python_files_in_path_order_and_says_what_it_left_out(source_tree):
    read = corpus.read_python_sources(source_tree, spec="test")
    assert [f.path for f in read.files] == ["a.py", "b.py", "pkg/z.py"]
    assert read.skipped == {"empty": 1, "generated": 1, "not utf-8": 1}
    assert read.num_bytes == sum(len(f.text.encode()) for f in read.files)


def test_digest_is_sha256_over_paths_and_bytes_and_sees_one_byte(source_tree):
    read = corpus.read_python_sources(source_tree)
    expected = hashlib.sha256()
    for relative in ("a.py", "b.py", "pkg/z.py"):
        data = (source_tree / relative).read_bytes()
        expected.update(f"{relative}\0{len(data)}\0".encode() + data)
    assert read.digest == expected.hexdigest()

    (source_tree / "pkg/z.py").write_text("Z = 27\n")
    assert corpus.read_python_sources(source_tree).digest != read.digest
    (source_tree / "pkg/z.py").write_text("Z = 26\n")
    (source_tree / "pkg/z.py").rename(source_tree / "pkg/y.py")      # same bytes, another path
    assert corpus.read_python_sources(source_tree).digest != read.digest


def test_an_empty_or_missing_root_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        corpus.read_python_sources(tmp_path / "absent")
    _write(tmp_path / "empty", {"x.txt": "no python here"})
    with pytest.raises(DataError, match="no usable"):
        corpus.read_python_sources(tmp_path / "empty")


def _tree_of(tmp_path, count: int) -> corpus.Corpus:
    files = {f"m{i:03d}.py": f"VALUE_{i} = {i}\n" for i in range(count)}
    return corpus.read_python_sources(_write(tmp_path / f"t{count}", files))


def test_split_is_by_whole_file_disjoint_and_stable_when_other_files_come_and_go(tmp_path):
    small, large = _tree_of(tmp_path, 200), _tree_of(tmp_path, 300)
    train, held_out = corpus.split_by_path(small, val_fraction=0.1, seed=0)
    assert 8 <= len(held_out) <= 35 and len(train) + len(held_out) == 200   # binomial(200, 0.1): 20 ± 4
    assert not {f.path for f in train} & {f.path for f in held_out}
    _, held_out_large = corpus.split_by_path(large, val_fraction=0.1, seed=0)
    # A file's side depends on its path alone: 100 more files move none of the first 200.
    small_paths = {f.path for f in small.files}
    assert {f.path for f in held_out_large if f.path in small_paths} == {f.path for f in held_out}
    assert corpus.split_by_path(small, val_fraction=0.1, seed=0) == (train, held_out)
    assert corpus.split_by_path(small, val_fraction=0.1, seed=1) != (train, held_out)


def test_identical_texts_never_sit_on_both_sides(tmp_path):
    same = "print('the same module')\n"
    tree = corpus.read_python_sources(_write(tmp_path / "dup", {f"d{i}.py": same for i in range(20)} |
                                             {f"u{i}.py": f"U = {i}\n" for i in range(20)}))
    for seed in range(5):
        train, held_out = corpus.split_by_path(tree, val_fraction=0.3, seed=seed)
        assert not {f.text for f in train} & {f.text for f in held_out}
        assert sum(f.text == same for f in train + held_out) == 1


def test_the_stdlib_corpus_is_this_interpreters_and_a_wrong_digest_is_refused():
    json_package = corpus.load("stdlib/json")
    assert json_package.root == Path(sysconfig.get_paths()["stdlib"]) / "json"
    assert "decoder.py" in [f.path for f in json_package.files]
    train, held_out, read = corpus.documents_for("stdlib/json", val_fraction=0.2, seed=0,
                                                 expected_digest=json_package.digest)
    assert read.digest == json_package.digest and len(train) + len(held_out) == len(json_package.files)
    with pytest.raises(DataError, match="rebuild the checkpoint"):
        corpus.documents_for("stdlib/json", val_fraction=0.2, seed=0, expected_digest="0" * 64)


@pytest.mark.parametrize("spec", ["pypi", "stdlib/../..", "stdlib//etc"])
def test_unknown_or_escaping_corpus_specs_are_refused(spec):
    with pytest.raises(DataError):
        corpus.load(spec)
