"""The shape of pv/: verbs stay leaves (nothing but the CLI imports them), no module grows
past 600 lines, and no import cycle between the core modules.

Each rule is checked on the source with `ast`, so a violation names the file and line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PV = ROOT / "pv"
MAX_LINES = 600


def _modules(base: Path) -> list[Path]:
    return sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)


def _imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, dotted module) for every import in the file, relative ones made absolute."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _commands_imports(files: list[Path], root: Path = ROOT) -> list[str]:
    return [f"{p.relative_to(root).as_posix()}:{line}: imports {name}"
            for p in files for line, name in _imports(p, root)
            if name == "pv.commands" or name.startswith("pv.commands.")]


def test_only_the_cli_and_the_verbs_import_pv_commands():
    outside = [p for p in _modules(PV) + _modules(ROOT / "pvlab")
               if PV / "commands" not in p.parents and p != PV / "cli.py"]
    assert len(outside) > 20  # the scan sees the core modules
    assert _commands_imports(outside) == []


def test_the_import_rule_sees_a_violation(tmp_path):
    """The scanner itself: a core module that imports a verb, absolutely or relatively, is
    reported with its line."""
    probe = tmp_path / "pv" / "probe.py"
    probe.parent.mkdir()
    probe.write_text("import os\nfrom pv.commands.generate import command\nfrom .commands import run\n")
    assert _commands_imports([probe], tmp_path) == [
        "pv/probe.py:2: imports pv.commands.generate", "pv/probe.py:2: imports pv.commands.generate.command",
        "pv/probe.py:3: imports pv.commands", "pv/probe.py:3: imports pv.commands.run"]


@pytest.mark.parametrize("path", _modules(PV), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_of_pv_is_over_600_lines(path):
    lines = path.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines; split it by concern"


def test_validate_engine_does_not_import_the_dialect_reader_at_import_time():
    """pv.dialect used to import the validate verb while the verb imported pv.dialect."""
    names = {name for _, name in _imports(PV / "dialect.py")}
    assert not any(n.startswith("pv.commands") or n.startswith("pv.validation") for n in names)
