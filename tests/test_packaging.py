"""Packaging: installing `pv` installs the `pv` package only; this repository's runtime under
test and its checks ship separately as `pv-lab` (package `pvlab`). A top-level `runtime` or
`falsifiers` in pv's wheel would shadow an adopting project's own packages (issue 17).

The wheels are built from copies of the sources in tmp_path, so the build's `build/` and
`*.egg-info` folders never land in the checkout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # each build takes a few seconds

IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")


def build_wheel(source: Path, out: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
         "-q", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [wheel] = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def top_level(names: list[str]) -> set[str]:
    return {name.split("/", 1)[0] for name in names}


@pytest.fixture(scope="module")
def pv_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("pv-wheel")
    source = tmp / "pv-src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, source / name)
    shutil.copytree(REPO_ROOT / "pv", source / "pv", ignore=IGNORE)
    shutil.copytree(REPO_ROOT / "pvlab", source / "pvlab", ignore=IGNORE)  # present, and must stay out
    build_wheel(source, tmp / "wheels")
    [wheel] = (tmp / "wheels").glob("*.whl")
    return wheel


def test_pv_wheel_holds_only_pv(pv_wheel: Path):
    with zipfile.ZipFile(pv_wheel) as archive:
        names = archive.namelist()

    dist_info = {t for t in top_level(names) if t.endswith(".dist-info")}
    assert top_level(names) - dist_info == {"pv"}, sorted(top_level(names))
    assert not any(n.split("/")[0] in {"runtime", "falsifiers", "pvlab"} for n in names)
    # what `pv init` and `pv validate` need at run time is inside the wheel
    for needed in ("pv/cli.py", "pv/commands/init.py", "pv/commands/schema.py", "pv/schema/contract.schema.json",
                   "pv/templates/test_module.py.j2", "pv/templates/init/checks.py.tmpl",
                   "pv/templates/init/demo-softmax-v1.yaml.tmpl"):
        assert needed in names, needed
    # the console script and the pytest plugin that adopters rely on
    with zipfile.ZipFile(pv_wheel) as archive:
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        text = archive.read(entry_points).decode()
    assert "[console_scripts]\npv = pv.cli:main" in text and "[pytest11]\npv = pv.plugin" in text, text


def test_pvlab_wheel_holds_only_pvlab(tmp_path: Path):
    source = tmp_path / "pvlab"
    shutil.copytree(REPO_ROOT / "pvlab", source, ignore=IGNORE)

    names = build_wheel(source, tmp_path / "wheels")

    dist_info = {t for t in top_level(names) if t.endswith(".dist-info")}
    assert top_level(names) - dist_info == {"pvlab"}, sorted(top_level(names))
    for needed in ("pvlab/__init__.py", "pvlab/runtime/model.py", "pvlab/falsifiers/mutants/__init__.py", "pvlab/falsifiers/mutants/planting.py"):
        assert needed in names, needed
    assert "pvlab/pyproject.toml" not in names


def test_a_fresh_venv_with_pv_alone_has_no_runtime_or_falsifiers(pv_wheel: Path, tmp_path: Path):
    """pip install of pv (without its dependencies: offline) into a new virtual environment:
    site-packages gains `pv` and its dist-info, nothing named runtime, falsifiers or pvlab."""
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    before = {p.name for p in site.iterdir()}
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                           "--disable-pip-version-check", str(pv_wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    added = {p.name for p in site.iterdir()} - before
    assert {n for n in added if not n.endswith(".dist-info")} == {"pv"}, sorted(added)
    assert not {"runtime", "falsifiers", "pvlab"} & {p.name for p in site.iterdir()}
    assert (venv / "bin" / "pv").exists()  # the console script came with it
