"""`pv init [--package NAME]`: make the current directory a pv project.

Writes, from pv/templates/init/:
- the `[tool.pv]` table, appended to an existing pyproject.toml (every byte of it kept; the
  result is parsed before it is written) or in a new one;
- contracts/demo-softmax-v1.yaml, a first contract that validates, naming the schema below;
- a check package: a plain-Python measurement (softmax against 50-digit decimal arithmetic),
  the code it measures, and one planted bug that the check kills;
- .pre-commit-config.yaml with pv's four hooks (local, offline);
- `code_packages`: the project's own packages (root or src/), so an edit to the code under test
  stales the evidence that used it (a commented line when none is found);
- .pv/contract.schema.json, the schema editors read (what `pv schema --write` writes);
- with `--ci github`, .github/workflows/pv.yml: validate, generate --check, the CPU falsifiers
  without recording, status --check and --require-fresh. In a project that is a pv project
  already, `pv init --ci github` writes only that file; an existing workflow is replaced only
  with `--force`.

Nothing that exists is overwritten: if any target exists (or the files pv will write later,
the ledger and the dashboard), init writes nothing and exits 2 naming them.

The default check package is `<project>_checks` (the project's name from [project] or its
directory). A generic name such as `checks` or `falsifiers` is what another installed
distribution may also ship; pv's pytest plugin puts the project root first on sys.path, so a
generic name would shadow (or be shadowed by) that package. A name derived from the project is
the project's own. `--package` names it otherwise; a name that is already importable from the
environment or the standard library is refused for the same reason.
"""

from __future__ import annotations

import datetime
import importlib.util
import keyword
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from string import Template

import click

from pv.commands.schema import PROJECT_SCHEMA, schema_reference
from pv.ledgermerge import DRIVER_CONFIG

TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "init"
CONTRACT_NAME = "demo-softmax-v1.yaml"
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Planned:
    path: Path  # relative to the project root
    text: str


def _render(template: str, **values: str) -> str:
    return Template((TEMPLATES / template).read_text(encoding="utf-8")).substitute(values)


def _read_pyproject(path: Path) -> tuple[str | None, dict]:
    if path.exists() and not path.is_file():  # found now, not after the other files were written
        raise click.UsageError(f"{path.name} is not a regular file (a directory?); move it away, then run `pv init` again")
    if not path.is_file():
        return None, {}
    try:
        text = path.read_text(encoding="utf-8")
        return text, tomllib.loads(text.removeprefix("\ufeff"))  # a BOM (Windows editors) is kept, not parsed
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise click.UsageError(f"{path.name} is not valid TOML ({exc}); fix it, then run `pv init` again") from None


def default_package(root: Path, pyproject: dict) -> str:
    """`<project>_checks`, from [project] name or the directory name, as an identifier."""
    name = pyproject.get("project", {}).get("name") if isinstance(pyproject.get("project"), dict) else None
    if not isinstance(name, str) or not name.strip():
        name = root.name
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "project"
    if slug[0].isdigit():
        slug = "p" + slug
    return f"{slug}_checks"


def package_problem(name: str, root: Path) -> str | None:
    """Why `name` cannot be the check package, or None. (One inside `root` itself is reported
    as a file in the way, not here.)"""
    if not IDENTIFIER.match(name) or keyword.iskeyword(name):
        return f"{name!r} is not a Python package name (letters, digits, underscores; no dots)"
    if name in sys.stdlib_module_names:
        return f"{name!r} is a standard-library module; a check package of that name would shadow it"
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    locations = [spec.origin, *(spec.submodule_search_locations or [])] if spec is not None else []
    if spec is not None and not any(loc and Path(loc).resolve().is_relative_to(root) for loc in locations):
        where = spec.origin or ", ".join(spec.submodule_search_locations or []) or "the environment"
        return f"a module {name!r} is already importable ({where}); the two would shadow each other"
    return None


# Folders that hold a package but not the code under test.
NOT_CODE = {"tests", "test", "generated_tests", "docs", "examples", "scripts", "build", "dist"}


def code_packages(root: Path, check_package: str) -> list[str]:
    """The project's own top-level packages (a folder with __init__.py, at the root or under
    src/): the code the checks measure, whose edits must stale the evidence."""
    found = []
    for base in (root, root / "src"):
        try:
            entries = sorted(base.iterdir())
        except OSError:
            continue
        found += [d.name for d in entries if d.name not in NOT_CODE and d.name != check_package
                  and IDENTIFIER.match(d.name) and (d / "__init__.py").is_file()]
    return found


def code_packages_line(packages: list[str]) -> str:
    if packages:
        return "code_packages = [" + ", ".join(f'"{p}"' for p in packages) + "]"
    return '# code_packages = ["your_package"]   (none found: name the package your checks measure)'


def pyproject_text(existing: str | None, package: str, code: list[str] | None = None) -> str:
    """The pyproject.toml with the [tool.pv] table appended (or a new file holding only it)."""
    table = _render("tool-pv.toml.tmpl", package=package, code_packages=code_packages_line(code or []))
    if existing is None:
        return table
    separator = "" if not existing else ("\n" if existing.endswith("\n") else "\n\n")
    text = existing + separator + table
    try:
        tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        # e.g. `tool = {...}` as an inline table, or dotted `tool.pv.x` keys: a [tool.pv]
        # header cannot be added there without rewriting the file.
        raise click.UsageError(f"pyproject.toml: appending a [tool.pv] table would break it ({exc}); "
                               "add the table by hand (docs/adopting.md)") from None
    return text


# --template: (contract file, the module of code under test) of each scaffold
TEMPLATE_FILES = {"softmax": (CONTRACT_NAME, "softmax.py"), "torch": ("demo-rmsnorm-v1.yaml", "rmsnorm.py")}


def plan(root: Path, package: str, today: datetime.date, template: str = "softmax") -> list[Planned]:
    from pv.schema import json_schema_text

    schema_ref = schema_reference(root / "contracts", root / PROJECT_SCHEMA)
    if template == "torch":  # a torch project: pv.testing.torch_helpers, one check, one planted bug
        return [
            Planned(Path("contracts") / "demo-rmsnorm-v1.yaml", _render("torch/demo-rmsnorm-v1.yaml.tmpl",
                    package=package, schema=schema_ref, today=today.isoformat())),
            Planned(Path(package) / "__init__.py", _render("package_init.py.tmpl")),
            Planned(Path(package) / "rmsnorm.py", _render("torch/rmsnorm.py.tmpl")),
            Planned(Path(package) / "checks.py", _render("torch/checks.py.tmpl", package=package)),
            Planned(Path(package) / "mutants.py", _render("torch/mutants.py.tmpl", package=package)),
            Planned(Path(".pre-commit-config.yaml"), _render("pre-commit-config.yaml.tmpl")),
            Planned(Path(PROJECT_SCHEMA), json_schema_text()),
        ]
    return [
        Planned(Path("contracts") / CONTRACT_NAME,
                _render("demo-softmax-v1.yaml.tmpl", package=package, schema=schema_ref, today=today.isoformat())),
        Planned(Path(package) / "__init__.py", _render("package_init.py.tmpl")),
        Planned(Path(package) / "softmax.py", _render("softmax.py.tmpl")),
        Planned(Path(package) / "checks.py", _render("checks.py.tmpl", package=package)),
        Planned(Path(package) / "mutants.py", _render("mutants.py.tmpl", package=package)),
        Planned(Path(".pre-commit-config.yaml"), _render("pre-commit-config.yaml.tmpl")),
        Planned(Path(PROJECT_SCHEMA), json_schema_text()),
    ]


WORKFLOW = Path(".github/workflows/pv.yml")
CI_TEMPLATES = {"github": "github-workflow-pv.yml.tmpl"}


def ci_file(ci: str) -> Planned:
    # read raw, not through string.Template: the workflow's own `$VAR`s are shell text
    return Planned(WORKFLOW, (TEMPLATES / CI_TEMPLATES[ci]).read_text(encoding="utf-8"))


def write_ci_only(root: Path, ci: str, force: bool) -> None:
    """`pv init --ci github` in a pv project: the workflow file alone."""
    from pv.atomic import write_text

    planned = ci_file(ci)
    target = root / planned.path
    if target.exists() and not force:
        raise click.UsageError(f"refusing to overwrite {planned.path}: it exists; nothing was written (compare it "
                               "with pv's template in docs/adopting.md, \"CI\", or use --force to replace it)")
    if target.exists() and not target.is_file():
        raise click.UsageError(f"{planned.path} is not a regular file; move it away and run again")
    existed = target.exists()
    write_text(target, planned.text)
    click.echo(f"  {'replaced' if existed else 'created '} {planned.path.as_posix()}")
    click.echo("Commit it; CI then fails a pull request on invalid contracts, stale generated tests, a falsified CPU "
               "falsifier, an out-of-date dashboard or stale ship-blocking evidence.")


# Files pv writes later with these settings: init refuses when one exists, so that `pv status`
# or `pv run` never overwrite or append to a file of the project's own.
LATER = (Path("evidence/ledger.jsonl"), Path("docs/STATUS.md"), Path("generated_tests"))


def _ledger_merge_attributes(root: Path) -> str | None:
    """Add the ledger's merge-driver line to .gitattributes (kept lines; pv.ledgermerge)."""
    from pv.atomic import write_text
    from pv.ledgermerge import gitattributes_text

    path = root / ".gitattributes"
    existing = path.read_text(encoding="utf-8") if path.is_file() else None
    text = gitattributes_text(existing)
    if text is None:
        return None
    write_text(path, text)
    return "created" if existing is None else "added to"


@click.command(name="init")
@click.option("--package", "package", metavar="NAME",
              help="Name of the check package to create (default: <project>_checks).")
@click.option("--ci", type=click.Choice(sorted(CI_TEMPLATES)), default=None,
              help="Also write a CI workflow (.github/workflows/pv.yml); in a pv project, only that.")
@click.option("--force", is_flag=True, help="With --ci: replace an existing workflow file.")
@click.option("--template", type=click.Choice(sorted(TEMPLATE_FILES)), default="softmax", show_default=True,
              help="The starter: plain-Python softmax, or a torch project (RMSNorm; pv.testing.torch_helpers).")
def command(package: str | None, ci: str | None, force: bool, template: str) -> None:
    """Make the current directory a pv project: [tool.pv], a first contract, a check package
    with a planted bug, pre-commit hooks and the schema for editors. Overwrites nothing."""
    from pv.atomic import write_text
    from pv.config import ConfigError, find_pyproject

    root = Path.cwd().resolve()
    pyproject_path = root / "pyproject.toml"
    existing, data = _read_pyproject(pyproject_path)
    if force and not ci:
        raise click.UsageError("--force only applies with --ci (pv init never overwrites the scaffold)")
    if ci and isinstance(data.get("tool"), dict) and "pv" in data["tool"]:
        write_ci_only(root, ci, force)
        return
    if isinstance(data.get("tool"), dict) and "pv" in data["tool"]:
        raise click.UsageError("pyproject.toml already has a [tool.pv] table: this is a pv project already")
    try:
        outer = find_pyproject(root.parent) if root.parent != root else None
    except ConfigError:
        outer = None
    package = package or default_package(root, data)
    problem = package_problem(package, root)
    if problem:
        raise click.UsageError(f"{problem}; choose another with --package NAME")

    files = plan(root, package, datetime.date.today(), template) + ([ci_file(ci)] if ci else [])
    taken = [p for p in [Path(package), *(f.path for f in files), *LATER] if (root / p).exists()
             and not (force and p == WORKFLOW)]
    if taken:
        raise click.UsageError(
            "refusing to overwrite: " + ", ".join(str(p) + ("/" if (root / p).is_dir() else "") for p in taken)
            + " already exist(s); nothing was written (move them away, or use --package for another package name)")
    new_pyproject = pyproject_text(existing, package, code_packages(root, package))

    written: list[str] = []
    try:
        for f in files:  # pyproject.toml last: until it has [tool.pv], a rerun finds nothing to undo but these
            write_text(root / f.path, f.text)
            written.append(f.path.as_posix())
        write_text(pyproject_path, new_pyproject)
        attributes = _ledger_merge_attributes(root)
    except OSError as exc:
        raise click.ClickException(f"cannot write: {exc}; written so far: {', '.join(written) or 'nothing'} "
                                   "(remove them before running `pv init` again)") from None
    action = "created" if existing is None else "added [tool.pv] to"
    click.echo(f"  {action} pyproject.toml")
    for f in files:
        click.echo(f"  created  {f.path.as_posix()}")
    if attributes:
        click.echo(f"  {attributes} .gitattributes (the ledger's merge driver)")
    if template == "torch" and importlib.util.find_spec("torch") is None:
        click.echo("note: torch is not installed in this environment; the torch checks need it (pip install torch)")
    if outer is not None:
        click.echo(f"note: {outer} also has a [tool.pv] table; from here down this project's settings apply")
    click.echo(f"""
Next steps:
  pv validate                     # the first contract validates
  pv generate                     # contracts -> generated_tests/
  pv run --all --device cpu       # run the falsifier, record evidence in evidence/ledger.jsonl
  pv strength --device cpu        # the planted bug in {package}/mutants.py must be killed
  pv status                       # docs/STATUS.md from the evidence
  pre-commit install              # pv's hooks on every commit (pip install pre-commit)
  {DRIVER_CONFIG}
                                  # once per clone: branches' evidence merges without conflict
Then write a contract about your own code: copy contracts/{TEMPLATE_FILES[template][0]}, bind its check to a
function in {package}/, and plant a bug it must catch in {package}/mutants.py.""")
