"""pv.provenance: which commit a record says it ran, and where that claim came from."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pv import provenance

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _torch_version_file(monkeypatch, tmp_path, text: str) -> Path:
    """An installed torch that only find_spec can see: its package directory holds version.py with
    `text`; returns the file, so a test can rewrite it."""
    import importlib.machinery

    package = tmp_path / "torch"
    package.mkdir()
    (package / "version.py").write_text(text)
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    monkeypatch.setattr(provenance.importlib.util, "find_spec", lambda name: spec if name == "torch" else None)
    return package / "version.py"


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True)
    return done.stdout.strip()


def state(root: Path) -> provenance.GitState:
    provenance.git_state.cache_clear()
    return provenance.git_state(root, exclude=(str(root / "evidence" / "ledger.jsonl"),))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("PV_GIT_COMMIT", raising=False)
    monkeypatch.delenv("PV_GIT_DIRTY", raising=False)
    yield
    provenance.git_state.cache_clear()


def test_a_copy_inside_another_repository_does_not_take_its_commit(tmp_path, monkeypatch):
    # The attack seen: a working-tree copy dropped inside some unrelated repository.
    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "README").write_text("another project\n")
    git(outer, "init", "-q")
    git(outer, "add", "-A")
    git(outer, "commit", "-qm", "unrelated")
    copy = outer / "copy-of-pv"
    copy.mkdir()
    (copy / "pyproject.toml").write_text("[tool.pv]\n")
    assert state(copy) == (None, None, None)  # unknown, never the unrelated commit
    monkeypatch.setenv("PV_GIT_COMMIT", "c" * 40)
    monkeypatch.setenv("PV_GIT_DIRTY", "0")
    assert state(copy) == ("c" * 40, False, "PV_GIT_COMMIT")
    outer_commit = git(outer, "rev-parse", "HEAD")  # even a commit the outer repository has:
    monkeypatch.setenv("PV_GIT_COMMIT", outer_commit)
    monkeypatch.setenv("PV_GIT_DIRTY", "1")
    assert state(copy) == (outer_commit, True, "PV_GIT_COMMIT")  # dirty as said: the outer git is not asked


def test_an_explicit_commit_wins_over_git_and_dirty_is_measured_against_it(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text("[tool.pv]\n")
    (repo / "code.py").write_text("x = 1\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    first = git(repo, "rev-parse", "HEAD")
    (repo / "code.py").write_text("x = 2\n")
    git(repo, "commit", "-qam", "two")
    second = git(repo, "rev-parse", "HEAD")
    assert state(repo) == (second, False, "git")

    monkeypatch.setenv("PV_GIT_COMMIT", first)  # the tree is at `second`: its tracked files differ
    assert state(repo) == (first, True, "PV_GIT_COMMIT")
    monkeypatch.setenv("PV_GIT_COMMIT", second)
    monkeypatch.setenv("PV_GIT_DIRTY", "1")  # git can tell, so it is asked, not the variable
    assert state(repo) == (second, False, "PV_GIT_COMMIT")
    (repo / "code.py").write_text("x = 3\n")
    assert state(repo) == (second, True, "PV_GIT_COMMIT")


def test_versions_read_an_imported_torch_and_its_cuda(monkeypatch):
    """A check that imported torch: its version and CUDA build are recorded (a fake module, so
    the test never imports torch)."""
    import types

    from pv import provenance

    fake = types.ModuleType("torch")
    fake.__version__ = "9.9.9+cu999"
    fake.version = types.SimpleNamespace(cuda="99.9")
    monkeypatch.setitem(sys.modules, "torch", fake)
    got = provenance.versions()
    assert (got["torch"], got["cuda"]) == ("9.9.9+cu999", "99.9")
    fake.version = types.SimpleNamespace(cuda=None)  # a CPU build
    assert provenance.versions()["cuda"] is None


def test_versions_read_torch_version_file_without_importing_torch(monkeypatch, tmp_path):
    """torch not imported: its installed version.py is read as text, never imported."""
    version_file = _torch_version_file(monkeypatch, tmp_path,
                                       "raise SystemExit('imported!')\n__version__: str = '8.8.8'\ncuda = '12.8'\n")
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    got = provenance.versions()
    assert (got["torch"], got["cuda"]) == ("8.8.8", "12.8")
    version_file.write_text("__version__ = '8.8.8'\ncuda = None\n")
    assert provenance.versions()["cuda"] is None
    monkeypatch.setattr(provenance.importlib.util, "find_spec", lambda name: None)  # no torch at all
    assert (provenance.versions()["torch"], provenance.versions()["cuda"]) == (None, None)


def test_the_cpu_is_named_by_its_model_and_an_unknown_device_by_nothing():
    assert provenance.device_name("cpu") == provenance.cpu_name() and provenance.cpu_name()
    assert provenance.device_name("tpu") is None


def test_without_torch_cuda_is_unavailable_with_that_reason(monkeypatch):
    monkeypatch.delenv("PV_FORCE_NO_CUDA", raising=False)
    monkeypatch.setattr(provenance, "_torch", lambda import_if_needed: None)
    assert provenance.cuda_available() == (False, "cuda requested but torch is not installed")


def test_a_torch_without_a_gpu_makes_cuda_unavailable_with_that_reason(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.delenv("PV_FORCE_NO_CUDA", raising=False)
    fake = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False))
    monkeypatch.setattr(provenance, "_torch", lambda import_if_needed: fake)
    assert provenance.cuda_available() == (False, "cuda requested but torch.cuda.is_available() is False")


def test_only_cuda_is_named_by_the_gpu(monkeypatch):
    from types import SimpleNamespace

    cuda = SimpleNamespace(is_available=lambda: True, current_device=lambda: 0, get_device_name=lambda i: "Fake GPU")
    monkeypatch.setattr(provenance, "_torch", lambda import_if_needed: SimpleNamespace(cuda=cuda))
    assert provenance.device_name("cuda") == "Fake GPU" and provenance.device_name("tpu") is None


def test_a_computed_torch_version_is_not_read_as_text(monkeypatch, tmp_path):
    """Only a literal `__version__ = '...'` is a version; a computed one is skipped, the rest read."""
    _torch_version_file(monkeypatch, tmp_path, "__version__ = _from_git()\nversion, build = '1', '2'\ncuda = '12.8'\n")
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    got = provenance.versions()
    assert (got["torch"], got["cuda"]) == (None, "12.8")


def test_an_installed_torch_not_yet_imported_is_imported_to_ask_for_cuda(monkeypatch, tmp_path):
    """cuda_available() imports torch when it is installed but not loaded (a fake torch here)."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "from types import SimpleNamespace\ncuda = SimpleNamespace(is_available=lambda: False)\n")
    monkeypatch.delenv("PV_FORCE_NO_CUDA", raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # restored (or removed) when the test ends
    del sys.modules["torch"]
    monkeypatch.syspath_prepend(str(tmp_path))
    assert provenance.cuda_available() == (False, "cuda requested but torch.cuda.is_available() is False")
    assert sys.modules["torch"].__file__ == str(tmp_path / "torch" / "__init__.py")


def test_a_torch_module_without_a_version_yet_is_read_from_its_version_file(monkeypatch, tmp_path):
    """torch half-imported (in sys.modules, no __version__ set yet): its version.py is read as text."""
    import types

    _torch_version_file(monkeypatch, tmp_path, "__version__ = '7.7.7'\ncuda = None\n")
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    assert (provenance.versions()["torch"], provenance.versions()["cuda"]) == ("7.7.7", None)


def test_a_torch_whose_spec_cannot_be_found_has_no_version(monkeypatch):
    """find_spec raises ValueError for a module whose spec is unset: no torch version, no crash."""
    from pv import provenance

    def unreadable(name):
        raise ValueError(f"{name}.__spec__ is None")

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(provenance.importlib.util, "find_spec", unreadable)
    assert (provenance.versions()["torch"], provenance.versions()["cuda"]) == (None, None)


def test_a_torch_whose_cuda_probe_raises_makes_cuda_unavailable_with_that_reason(monkeypatch):
    from types import SimpleNamespace

    from pv import provenance

    def probe():
        raise RuntimeError("driver too old")

    monkeypatch.delenv("PV_FORCE_NO_CUDA", raising=False)
    monkeypatch.setattr(provenance, "_torch", lambda import_if_needed: SimpleNamespace(cuda=SimpleNamespace(is_available=probe)))
    assert provenance.cuda_available() == (
        False, "cuda requested but torch.cuda.is_available() raised RuntimeError: driver too old")


def test_cuda_forced_off_or_a_torch_that_cannot_be_imported_makes_cuda_unavailable(monkeypatch):
    from pv import provenance

    monkeypatch.setenv("PV_FORCE_NO_CUDA", "1")
    assert provenance.cuda_available() == (False, "cuda requested but PV_FORCE_NO_CUDA is set")
    monkeypatch.delenv("PV_FORCE_NO_CUDA")

    def broken(import_if_needed):
        raise ImportError("libcudart.so.12: cannot open shared object file")

    monkeypatch.setattr(provenance, "_torch", broken)
    assert provenance.cuda_available() == (False, "cuda requested but torch cannot be imported "
                                           "(ImportError: libcudart.so.12: cannot open shared object file)")
