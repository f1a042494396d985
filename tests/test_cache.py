"""pv.cache: a decided fact is read back only under the bytes (and version) it came from."""

from __future__ import annotations

import json
import sys

import pytest

from pv import cache


def test_a_value_survives_a_new_process_only_under_the_same_version(tmp_path):
    store = cache.Cache(tmp_path, "facts", "v1")
    key = cache.key_of(b"some source")
    assert store.get(key) is None
    store.put(key, ["a", "b"])
    store.save()
    assert cache.Cache(tmp_path, "facts", "v1").get(key) == ["a", "b"]
    assert cache.Cache(tmp_path, "facts", "v2").get(key) is None  # another computation: ignored whole
    assert (tmp_path / ".pv-cache" / "pv" / ".gitignore").read_text().strip().endswith("*")


def test_keys_separate_their_parts():
    assert cache.key_of(b"ab", b"c") != cache.key_of(b"a", b"bc")
    assert cache.key_of("x") == cache.key_of(b"x")


def test_a_corrupt_or_foreign_file_is_a_miss_never_an_error(tmp_path):
    path = tmp_path / ".pv-cache" / "pv" / "facts.json"
    path.parent.mkdir(parents=True)
    for text in ("{not json", "[1, 2]", json.dumps({"version": "v1", "entries": [1]}), "[" * 5000):
        path.write_text(text)
        assert cache.Cache(tmp_path, "facts", "v1").get("k") is None


def test_pv_no_cache_neither_reads_nor_writes(tmp_path, monkeypatch):
    store = cache.Cache(tmp_path, "facts", "v1")
    store.put("k", 1)
    store.save()
    monkeypatch.setenv("PV_NO_CACHE", "1")
    assert cache.Cache(tmp_path, "facts", "v1").get("k") is None
    other = cache.Cache(tmp_path, "other", "v1")
    other.put("k", 2)
    other.save()
    assert not (tmp_path / ".pv-cache" / "pv" / "other.json").exists()


def test_an_unwritable_cache_is_ignored(tmp_path):
    (tmp_path / ".pv-cache").write_text("a file where the directory would go")
    store = cache.Cache(tmp_path, "facts", "v1")
    store.put("k", 1)
    store.save()  # no exception
    assert store.get("k") == 1


def test_validate_sees_every_edit_to_what_it_remembered(vworkspace):
    """Signatures and mutant names are remembered by the bytes of their module: an edit shows."""
    vworkspace.contract()
    assert vworkspace.run().exit_code == 0
    assert (vworkspace.root / ".pv-cache" / "pv" / "module-facts.json").exists()
    demo = vworkspace.root / "falsifiers" / "demo.py"
    original = demo.read_text()
    demo.write_text(original.replace("checkpoint, batches=1, tolerance=None", "checkpoint, tolerance=None"))
    result = vworkspace.run()
    assert result.exit_code == 1 and "PV313" in result.output, result.output
    demo.write_text(original)
    assert vworkspace.run().exit_code == 0
    mutants = vworkspace.root / "falsifiers" / "mutants.py"
    mutants.write_text(mutants.read_text().replace('"drops_bias"', '"drops_the_bias"'))
    result = vworkspace.run()
    assert result.exit_code == 1 and "PV309" in result.output, result.output


def test_installed_version_reads_metadata_and_names_an_absent_distribution():
    assert cache.installed_version("pydantic")[0].isdigit()
    assert cache.installed_version("no-such-distribution-pv-test") == "absent"


def test_a_cache_file_not_signed_by_this_account_is_a_miss(tmp_path, monkeypatch):
    """A cache is an input too: a hand-written or foreign file must never be believed."""
    store = cache.Cache(tmp_path, "facts", "v1")
    store.put("k", ["found nothing"])
    store.save()
    path = tmp_path / ".pv-cache" / "pv" / "facts.json"
    signed = path.read_bytes()
    assert signed.startswith(cache.SIGNATURE_PREFIX)
    body = signed.split(b"\n", 1)[1]
    path.write_bytes(body)  # the same facts, unsigned
    assert cache.Cache(tmp_path, "facts", "v1").get("k") is None
    path.write_bytes(signed.replace(b"found nothing", b"found nothinG"))  # edited after signing
    assert cache.Cache(tmp_path, "facts", "v1").get("k") is None
    path.write_bytes(signed)
    assert cache.Cache(tmp_path, "facts", "v1").get("k") == ["found nothing"]  # the control
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another-account"))
    monkeypatch.setattr(cache, "_SECRETS", {})
    assert cache.Cache(tmp_path, "facts", "v1").get("k") is None  # signed under another secret


def test_the_secret_is_made_once_private_and_outside_the_workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    monkeypatch.setattr(cache, "_SECRETS", {})
    key = cache.secret()
    path = tmp_path / "home-cache" / "pv" / "cache-key"
    assert key is not None and path.read_bytes() == key and len(key) == 2 * cache.SECRET_BYTES
    assert path.stat().st_mode & 0o077 == 0
    monkeypatch.setattr(cache, "_SECRETS", {})
    assert cache.secret() == key  # read back, not made anew
    assert [p.name for p in path.parent.iterdir()] == ["cache-key"]  # no temporary left behind


def test_without_a_secret_nothing_is_cached(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache home would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr(cache, "_SECRETS", {})
    assert cache.secret() is None and not cache.enabled()
    store = cache.Cache(tmp_path, "facts", "v1")
    store.put("k", 1)
    store.save()
    assert not (tmp_path / ".pv-cache" / "pv" / "facts.json").exists()


def test_a_store_loaded_before_pv_no_cache_was_set_reads_nothing_after(tmp_path, monkeypatch):
    """Stores kept for a process (pv.codebind's) outlive one run: PV_NO_CACHE=1 set later still
    means nothing is read, and nothing kept."""
    monkeypatch.delenv("PV_NO_CACHE", raising=False)
    store = cache.Cache(tmp_path, "facts", "v1")
    key = cache.key_of(b"some source")
    store.put(key, "remembered")
    assert store.get(key) == "remembered"
    monkeypatch.setenv("PV_NO_CACHE", "1")
    assert store.get(key) is None
    store.put(cache.key_of(b"other"), "not kept")
    assert store.take_added() == {key: "remembered"}


@pytest.mark.parametrize("name", ["pydantic", "PyYAML", "jinja2", "z3-solver", "z3_solver", "no-such-distribution"])
def test_an_installed_version_is_the_one_importlib_metadata_reads(name):
    from importlib import metadata

    try:
        expected = metadata.version(name)
    except metadata.PackageNotFoundError:
        expected = "absent"
    assert cache.installed_version(name) == expected


def test_a_version_is_read_where_the_search_path_finds_the_distribution_first(tmp_path, monkeypatch):
    first, later = tmp_path / "first", tmp_path / "later"
    (first / "Demo_Dist-2.0.dist-info").mkdir(parents=True)
    (later / "demo_dist-1.0.dist-info").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "absent"), str(first), str(later)])
    assert cache.installed_version("demo-dist") == "2.0"
    monkeypatch.setattr(sys, "path", [str(later), str(first)])
    assert cache.installed_version("demo.dist") == "1.0"
    (later / "demo_dist-1.5.egg-info").mkdir()  # two in one place: importlib.metadata decides
    (later / "demo_dist-1.5.egg-info" / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: demo-dist\nVersion: 1.5\n")
    (later / "demo_dist-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-dist\nVersion: 1.0\n")
    from importlib import metadata

    assert cache.installed_version("demo-dist") == metadata.version("demo-dist")
