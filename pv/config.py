"""Workspace settings: the `[tool.pv]` table of the nearest pyproject.toml.

The same `pv` works in any repo that has such a table; every path in it is relative to the
directory holding that pyproject.toml.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path


class ConfigError(Exception):
    """The workspace settings are missing or malformed (a usage error: exit 2)."""


@dataclass(frozen=True)
class Workspace:
    root: Path
    contracts_dir: Path
    generated_dir: Path
    ledger: Path
    status_file: Path
    check_packages: tuple[str, ...]
    mutants_module: str | None
    bisect_adapter: str | None = None
    pyproject: Path | None = field(default=None)
    # Packages of the code under test whose modules bind evidence, besides check_packages.
    code_packages: tuple[str, ...] = ()
    # The check parameter a falsifier's subject fills (`subjects:` in a contract); pv itself
    # knows no runtime words, so the project names it (this repo: "checkpoint").
    subject_param: str = "subject"
    # Seconds one falsifier's check may run before it is stopped and recorded as ERROR (0: no
    # limit). A hung check must never hang `pv run`, and a stopped one is never a pass.
    check_timeout_s: float = 1800.0
    # Modules a check's child process imports untraced before its first bound module
    # (pv.childtrace): heavy third-party imports such as torch.
    untraced_imports: tuple[str, ...] = ()
    # The training runtimes falsifiers may run on: name -> "module:factory" (pv.runtimes); the
    # first is the default runtime. And the function that hands the pack a subject by name.
    runtimes: dict[str, str] = field(default_factory=dict)
    subject_provider: str | None = None

    @property
    def bound_packages(self) -> tuple[str, ...]:
        """Packages whose imported modules a ledger record is bound to (pv.codebind)."""
        return tuple(dict.fromkeys([*self.check_packages, *self.code_packages]))

    def contract_files(self) -> list[Path]:
        """Every contract file of the workspace, sorted for stable output. Hidden files (editor
        backups and lock files such as `.#x-v1.yaml`) are not contracts."""
        if not self.contracts_dir.is_dir():
            return []
        return [p for pattern in ("*.yaml", "*.yml") for p in sorted(self.contracts_dir.glob(pattern), key=str)
                if not p.name.startswith(".")]

    def rel(self, path: Path) -> str:
        """A path as the user would type it from the workspace root."""
        try:
            resolved = Path(path).resolve()
        except (RuntimeError, OSError):  # a symlink loop: name the link itself
            resolved = Path(os.path.abspath(path))
        try:
            return str(resolved.relative_to(self.root))
        except ValueError:
            return str(path)


_DEFAULTS = {
    "contracts_dir": "contracts",
    "generated_dir": "generated_tests",
    "ledger": "evidence/ledger.jsonl",
    "status_file": "docs/STATUS.md",
    "check_packages": ["falsifiers"],
    "mutants_module": None,
    # Module that tells `pv bisect` how to load a backend and which ops to compare.
    "bisect_adapter": None,
    # Packages of the system under test (e.g. ["pvlab.runtime"]) whose modules, when a check
    # imports them, bind its evidence: an edit to them makes the evidence stale. The check
    # packages always bind too.
    "code_packages": [],
    # The check parameter that a falsifier's `subjects:` fill (docs/contract-format.md).
    "subject_param": "subject",
    # Wall-clock limit of one falsifier's check, seconds; 0 turns it off. PV_CHECK_TIMEOUT
    # overrides it for one command (e.g. a slow machine, or a quick look with a short limit).
    "check_timeout_s": 1800,
    # Modules (e.g. ["torch"]) a check's child process imports, untraced, before its first
    # import of a bound package (pv.childtrace): no bound code exists yet, so none is missed.
    "untraced_imports": [],
    # Training runtimes by name, each "module:factory" returning its adapter (pv.runtimes).
    "runtimes": {},
    # "module:function" that returns a subject's directory for the falsifier pack (pvpack.subjects).
    "subject_provider": None,
}
_KNOWN_KEYS = set(_DEFAULTS)


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start` that has a [tool.pv] table."""
    start = start.resolve()
    for directory in [start, *start.parents]:
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8-sig"))
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{candidate}: not valid TOML: {exc}") from None
            tool = data.get("tool", {})
            if not isinstance(tool, dict):  # `tool = 5`: no [tool.pv] table can be in there
                raise ConfigError(f"{candidate}: `tool` must be a table (e.g. [tool.pv]), got {type(tool).__name__}")
            if "pv" in tool:
                return candidate
    return None


def load_workspace(start: Path | None = None) -> Workspace:
    """Settings of the workspace containing `start` (default: the current directory).

    Without a [tool.pv] table the defaults apply, rooted at `start`.
    """
    start = Path.cwd() if start is None else Path(start)
    pyproject = find_pyproject(start)
    settings = dict(_DEFAULTS)
    root = start.resolve()
    if pyproject is not None:
        root = pyproject.parent
        table = tomllib.loads(pyproject.read_text(encoding="utf-8-sig"))["tool"]["pv"]
        if not isinstance(table, dict):
            raise ConfigError(f"{pyproject}: [tool.pv] must be a table")
        unknown = sorted(set(table) - _KNOWN_KEYS)
        if unknown:
            raise ConfigError(
                f"{pyproject}: unknown key(s) in [tool.pv]: {', '.join(unknown)}; "
                f"known keys: {', '.join(sorted(_KNOWN_KEYS))}"
            )
        settings.update(table)
    packages = settings["check_packages"]
    if not isinstance(packages, list) or not all(isinstance(p, str) and p for p in packages):
        raise ConfigError(f"{pyproject}: [tool.pv] check_packages must be a list of package names")
    dotted = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
    bad = [p for p in packages if not dotted.match(p)]
    if bad:
        raise ConfigError(f"{pyproject}: [tool.pv] check_packages: not a package name: {', '.join(map(repr, bad))}")
    code_packages = settings["code_packages"]
    if not isinstance(code_packages, list) or not all(isinstance(p, str) and dotted.match(p) for p in code_packages):
        raise ConfigError(f"{pyproject}: [tool.pv] code_packages must be a list of dotted package names")
    untraced_imports = settings["untraced_imports"]
    if not isinstance(untraced_imports, list) or not all(isinstance(m, str) and dotted.match(m) for m in untraced_imports):
        raise ConfigError(f"{pyproject}: [tool.pv] untraced_imports must be a list of dotted module names")
    module = settings["mutants_module"]
    if module is not None and not (isinstance(module, str) and dotted.match(module)):
        raise ConfigError(f"{pyproject}: [tool.pv] mutants_module must be a dotted module name, got {module!r}")
    subject_param = settings["subject_param"]
    if not (isinstance(subject_param, str) and subject_param.isidentifier()) or subject_param in ("device", "tolerance"):
        raise ConfigError(f"{pyproject}: [tool.pv] subject_param must be a Python parameter name other than "
                          f"device and tolerance, got {subject_param!r}")
    check_timeout_s = _timeout(pyproject, settings["check_timeout_s"])
    from pv import runtimes as runtime_table

    try:
        runtimes = runtime_table.check_table(settings["runtimes"], f"{pyproject}: [tool.pv] runtimes")
        provider = runtime_table.check_provider(settings["subject_provider"],
                                                f"{pyproject}: [tool.pv] subject_provider")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for key in ("contracts_dir", "generated_dir", "ledger", "status_file"):
        if not isinstance(settings[key], str) or not settings[key]:
            raise ConfigError(f"{pyproject}: [tool.pv] {key} must be a non-empty path string")
    if pyproject is not None:
        _check_kinds(pyproject, root, settings)
    return Workspace(
        root=root,
        contracts_dir=root / settings["contracts_dir"],
        generated_dir=root / settings["generated_dir"],
        ledger=root / settings["ledger"],
        status_file=root / settings["status_file"],
        check_packages=tuple(packages),
        mutants_module=settings["mutants_module"],
        bisect_adapter=settings["bisect_adapter"],
        pyproject=pyproject,
        code_packages=tuple(code_packages),
        subject_param=subject_param,
        check_timeout_s=check_timeout_s,
        untraced_imports=tuple(untraced_imports),
        runtimes=runtimes,
        subject_provider=provider,
    )


def _timeout(pyproject: Path | None, configured: object) -> float:
    """[tool.pv] check_timeout_s, or PV_CHECK_TIMEOUT when set: a number of seconds >= 0."""
    override = os.environ.get("PV_CHECK_TIMEOUT")
    where = f"{pyproject}: [tool.pv] check_timeout_s" if pyproject is not None else "check_timeout_s"
    value: object = configured
    if override is not None:
        where = "PV_CHECK_TIMEOUT"
        try:
            value = float(override)
        except ValueError:
            value = override
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 7 * 24 * 3600:
        raise ConfigError(f"{where} must be a number of seconds between 0 (no limit) and 604800 (a week), "
                          f"got {value!r}")
    return float(value)


# (setting, what it must be where it exists). pv reads and writes these paths; one of the wrong
# kind (a ledger that is a directory, a generated_dir that is a file) would otherwise surface
# as an OSError in the middle of a verb, after part of its work was done.
_PATH_KINDS = (("contracts_dir", "directory"), ("generated_dir", "directory"), ("ledger", "file"),
               ("status_file", "file"))


def _check_kinds(pyproject: Path, root: Path, settings: dict) -> None:
    for key, kind in _PATH_KINDS:
        path = root / settings[key]
        if not path.exists():
            continue
        is_dir = path.is_dir()
        if (kind == "directory") != is_dir or (kind == "file" and not path.is_file()):
            found = "a directory" if is_dir else "not a directory" if kind == "directory" else "not a regular file"
            raise ConfigError(f"{pyproject}: [tool.pv] {key} = {settings[key]!r}: {path} is {found}, but pv needs a {kind} "
                              f"there; move it away or set {key} in [tool.pv] to another path")
