"""Where a piece of evidence came from: git commit and dirty flag, versions, host, device.

Nothing here imports torch unless torch is already imported (a check that ran on a device
has imported it) or the caller asks about a CUDA device, which cannot be answered without it.
The torch and CUDA *versions* are read from torch's installed `version.py` without importing
torch, so recording a CPU-only pure-Python check stays fast.
"""

from __future__ import annotations

import ast
import datetime
import functools
import importlib.util
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple


def utc_now() -> str:
    """ISO 8601 UTC with microseconds and a Z, e.g. 2026-11-22T03:01:02.123456Z (sorts as text)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _git(root: Path, *args: str) -> str | None:
    try:
        result = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True, text=True, timeout=20, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout if result.returncode == 0 else None


class GitState(NamedTuple):
    commit: str | None
    dirty: bool | None
    source: str | None  # "PV_GIT_COMMIT" | "git" | None (unknown)


def _env_dirty() -> bool | None:
    value = os.environ.get("PV_GIT_DIRTY")
    return None if value is None else value.strip().lower() not in ("0", "false", "no", "")


def _pathspecs(root: Path, exclude: tuple[str, ...]) -> list[str]:
    top = _git(root, "rev-parse", "--show-toplevel")
    if not top:
        return []
    specs = []
    for path in exclude:
        try:
            rel = Path(path).resolve().relative_to(Path(top.strip()).resolve())
        except ValueError:
            continue
        specs.append(f":(exclude,top){rel.as_posix()}")
    return [":(top)", *specs] if specs else []


def _tracks_workspace(root: Path) -> bool:
    """Whether the repository git finds at `root` tracks this workspace (its pyproject.toml):
    a copy of the tree dropped inside some other repository is not described by its commits."""
    return _git(root, "ls-files", "--error-unmatch", "--", "pyproject.toml") is not None


@functools.lru_cache(maxsize=16)
def git_state(root: Path, exclude: tuple[str, ...] = ()) -> GitState:
    """(commit, dirty, source) of the code at `root`. Cached per process: a test session
    reports the state it started from.

    An explicit `PV_GIT_COMMIT` wins over git (`pv run --git-commit` sets it): the person
    running says which commit this tree is. Dirty then means the tracked files differ from
    that commit (when git knows it), else `PV_GIT_DIRTY` decides (unknown without it).
    Otherwise git is asked, but only if its repository tracks this workspace. Dirty means a
    tracked file differs from HEAD or an untracked, non-ignored file exists — except the paths
    in `exclude` (the ledger itself, which every run appends to).
    """
    root = Path(root)
    explicit = (os.environ.get("PV_GIT_COMMIT") or "").strip()
    in_git = _git(root, "rev-parse", "HEAD") is not None and _tracks_workspace(root)
    specs = _pathspecs(root, exclude) if in_git else []
    if explicit:
        dirty = _env_dirty()
        if in_git and _git(root, "cat-file", "-e", f"{explicit}^{{commit}}") is not None:
            diff = _git(root, "diff", "--name-only", explicit, "--", *specs)
            dirty = None if diff is None else bool(diff.strip())
        return GitState(explicit, dirty, "PV_GIT_COMMIT")
    if not in_git:
        # A copy of the working tree without its .git (the GPU machine), or inside another
        # repository: say which commit it is, e.g. PV_GIT_COMMIT=$(git rev-parse HEAD).
        return GitState(None, None, None)
    commit = (_git(root, "rev-parse", "HEAD") or "").strip()
    status = _git(root, "status", "--porcelain", "-z", "--untracked-files=normal", *(["--", *specs] if specs else []))
    dirty = None if status is None else bool(status.strip("\0\n "))
    return GitState(commit, dirty, "git")


def _torch_version_file() -> dict[str, str | None]:
    """Read torch/version.py statically: {'torch': '2.13.0+cpu', 'cuda': None}."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    for location in spec.submodule_search_locations:
        path = Path(location) / "version.py"
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        found: dict[str, str | None] = {}
        for node in tree.body:
            target, value = None, None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign):
                target, value = node.target, node.value
            if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
                if target.id == "__version__":
                    found["torch"] = str(value.value)
                elif target.id == "cuda":
                    found["cuda"] = None if value.value is None else str(value.value)
        if found:
            return found
    return {}


def versions() -> dict[str, str | None]:
    """python, pv, torch and the CUDA version torch was built with (None where absent)."""
    from pv import __version__

    out: dict[str, str | None] = {
        "python": platform.python_version(),
        "pv": __version__,
        "torch": None,
        "cuda": None,
    }
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "__version__"):
        out["torch"] = str(torch.__version__)
        cuda = getattr(getattr(torch, "version", None), "cuda", None)
        out["cuda"] = None if cuda is None else str(cuda)
    else:
        out.update(_torch_version_file())
    return out


def host() -> str:
    return socket.gethostname()


@functools.lru_cache(maxsize=1)
def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _torch(import_if_needed: bool):
    torch = sys.modules.get("torch")
    if torch is None and import_if_needed and importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F811 - deliberate lazy import
    return torch


def cuda_available() -> tuple[bool, str]:
    """Whether a CUDA device can be used, and if not, why (the SKIP reason)."""
    if os.environ.get("PV_FORCE_NO_CUDA"):
        return False, "cuda requested but PV_FORCE_NO_CUDA is set"
    try:
        torch = _torch(import_if_needed=True)
    except Exception as exc:  # noqa: BLE001 - a broken torch install means no device
        return False, f"cuda requested but torch cannot be imported ({type(exc).__name__}: {exc})"
    if torch is None:
        return False, "cuda requested but torch is not installed"
    try:
        if torch.cuda.is_available():
            return True, ""
    except Exception as exc:  # noqa: BLE001
        return False, f"cuda requested but torch.cuda.is_available() raised {type(exc).__name__}: {exc}"
    return False, "cuda requested but torch.cuda.is_available() is False"


def device_name(device: str) -> str | None:
    """A human name for the device: the GPU model for cuda, the CPU model for cpu."""
    if device == "cpu":
        return cpu_name()
    if device == "cuda":
        try:
            torch = _torch(import_if_needed=True)
            if torch is not None and torch.cuda.is_available():
                return str(torch.cuda.get_device_name(torch.cuda.current_device()))
        except Exception:  # noqa: BLE001 - a name is nice to have, never worth an error
            return None
    return None
