"""The mutation section of `pv status` (docs/STATUS.md) and of `pv mutate`'s summary.

A pure function of the results file, the marked equivalents, the tree and the contracts: a
result whose module has changed since (another syntax-tree digest) is not shown, only counted as
stale, so the dashboard never scores code that is no longer there; nor is a kill whose killer is
no longer defined as it was when it killed (results.is_fresh's rule for a KILLED line, which
`pv mutate` resumes by): a prediction loosened since, or the falsifier removed, may let the
mutant through. No libcst, no torch: `pv status` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pv.automutate import results as store
from pv.codebind import TreeDigests
from pv.markdown import md_code, md_text
from pv.markdown import table as md_table

RESULTS_NAME = "mutation.jsonl"
EQUIVALENTS_NAME = "equivalent-mutants.toml"


def default_paths(workspace: Any) -> tuple[Path, Path]:
    """(results file, equivalents file): beside the ledger."""
    folder = Path(workspace.ledger).parent
    return folder / RESULTS_NAME, folder / EQUIVALENTS_NAME


def current_lines(results: store.Results, tree: TreeDigests,
                  definitions: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], int, int]:
    """(the latest line of every mutant whose module is unchanged, the number left out as stale,
    the number of kills left out because their killer changed since). `definitions`: falsifier ->
    its definition now (store.definition_of); None: kills are not judged by their killer."""
    fresh, stale, killer_changed = [], 0, 0
    for mutant_id in sorted(results.mutants):
        line = results.mutants[mutant_id]
        if tree.digest(str(line.get("module"))) != line.get("module_digest"):
            stale += 1
        elif definitions is not None and line.get("result") == store.KILLED and not store.killer_unchanged(
                line, definitions):
            killer_changed += 1  # the falsifier that killed it is defined otherwise now, or gone
        else:
            fresh.append(line)
    return fresh, stale, killer_changed


def _score(tally: store.Tally) -> str:
    return "—" if tally.score is None else f"{100 * tally.score:.1f}%"


def _rows(tallies: dict[str, store.Tally], code: bool = True) -> list[list[str]]:
    c = store
    return [[md_code(name) if code else name, _score(t), f"{t.counts[c.KILLED]}/{t.judged}", str(t.counts[c.SURVIVED]),
             str(t.counts[c.TIMEOUT]), str(t.counts[c.ERROR]), str(t.counts[c.NOT_APPLIED]), str(t.equivalent)]
            for name, t in tallies.items()]


HEADER = ["", "score", "killed", "survived", "timeout", "error", "not applied", "equivalent"]


def section(results_path: Path, equivalents_path: Path, workspace_root: Path, rel: Any = str,
            definitions: dict[str, str] | None = None) -> list[str]:
    """Markdown lines of the `## Mutation score` section (empty when nothing was ever run).
    `definitions`: every contract falsifier's definition now (store.definition_of)."""
    try:
        results = store.read(results_path)
        equivalents = store.read_equivalents(equivalents_path)
    except store.ResultsError as exc:
        return ["## Mutation score", "", f"Cannot be shown: {exc}", ""]
    if not results.mutants:
        return []
    lines, stale, killer_changed = current_lines(results, TreeDigests(workspace_root), definitions)
    out = ["## Mutation score", "",
           f"Automatic source mutants of the code the contracts bind (`pv mutate`, docs/mutants.md), from "
           f"{md_code(rel(results_path))}. Score = killed / (killed + survived); a timeout, an error (the code "
           "crashed under the mutant) or a mutant not applied is not judged; mutants marked equivalent in "
           f"{md_code(rel(equivalents_path))} are left out."
           + (f" {stale} result(s) on code that has changed since are not shown (rerun `pv mutate`)." if stale else "")
           + (f" {killer_changed} kill(s) by a falsifier defined otherwise since (or in no contract now) are not "
              "counted (rerun `pv mutate`)." if killer_changed else ""),
           ""]
    total = store.Tally()
    for line in lines:
        total.add(line["result"], line["id"] in equivalents)
    out += [f"- all: {total.line()}", ""]
    out += ["### Per module", ""] + md_table(["module", *HEADER[1:]], _rows(store.tallies(lines, equivalents, "module"))) + [""]
    out += ["### Per contract", "",
            "Over the mutants of the modules a contract's falsifiers bind, judged by every falsifier bound to them "
            "(a run stops at the first falsifier that FAILs).", ""]
    out += md_table(["contract", *HEADER[1:]], _rows(store.tallies(lines, equivalents, "contracts"))) + [""]
    survivors = [line for line in lines if line["result"] == store.SURVIVED and line["id"] not in equivalents]
    out += ["### Surviving mutants", ""]
    if not survivors:
        out += ["None.", ""]
    else:
        rows = [[md_code(s["id"]), f"{s['path']}:{s['line']}", md_code(s["scope"]), s["operator"],
                 md_code(s["original"]), md_code(s["replacement"])]
                for s in sorted(survivors, key=lambda s: (s["path"], s["line"], s["id"]))]
        out += md_table(["mutant", "where", "in", "operator", "original", "mutated"], rows) + [""]
    marked = [line for line in lines if line["id"] in equivalents]
    if marked:
        out += ["### Marked equivalent", ""]
        rows = [[md_code(m["id"]), f"{m['path']}:{m['line']}", md_code(m["original"]), md_code(m["replacement"]),
                 md_text(equivalents[m["id"]])] for m in sorted(marked, key=lambda m: (m["path"], m["line"], m["id"]))]
        out += md_table(["mutant", "where", "original", "mutated", "why no test can tell"], rows) + [""]
    return out


def status_markdown(workspace: Any, contracts: Any = ()) -> str:
    """The section as text to append to docs/STATUS.md ("" when `pv mutate` never ran).
    `contracts`: the workspace's contracts, whose falsifiers' definitions judge the kills."""
    results_path, equivalents_path = default_paths(workspace)
    definitions = {f.id: store.definition_of(f, workspace.subject_param)
                   for c in contracts for f in c.falsification_tests}
    lines = section(results_path, equivalents_path, workspace.root, workspace.rel, definitions)
    return ("\n" + "\n".join(lines)) if lines else ""
