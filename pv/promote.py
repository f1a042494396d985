"""`pv status --promote`: set a contract's declared status from its evidence, in place.

The file is edited as text, not re-serialised: the nodes of `metadata.status`,
`metadata.version` and `metadata.changelog` are located with PyYAML's composer (start and end
offsets), and only those spans change; the new changelog entry is inserted after the last
line of the list, in the list's own indentation. Every other byte - comments, blank lines,
quoting, key order - stays as it was. Before anything is written the new text is parsed
again and compared with the old data: exactly status, version and one changelog entry may
differ, the result must validate, and no falsifier definition may change (so the evidence
stays fresh: `definition_sha256()` covers the falsifier only, not the contract's version).
The write is atomic (pv.atomic).

Changelog entries may be block mappings or flow mappings (`- {version: ..., date: ..., change: ...}`),
and the list a block list or a flow list (`[...]`); the new entry takes the style of the last one.

After the write the contract's generated test module is rewritten too (`apply`), so `pv generate
--check` still passes: the module records the contract file's sha256 and its version, and the
version is stamped into every ledger record the module writes. (Making the recorded hash ignore
status, version and changelog would keep the check quiet but leave records labelled with the old
version.)
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pv.atomic import write_text
from pv.declared import overclaim
from pv.lifecycle import HAND_SET, ContractStatus
from pv.loader import LoadedContract
from pv.schema import SEMVER_PATTERN, STATUS_RANK, Contract, LifecycleStatus

# The parser pv validate reads contracts with (libyaml when PyYAML has it): the pure-Python one
# rejects what libyaml accepts (a tab before a comment), so a contract that validates would be
# "not valid YAML" here. Its marks index characters, as the edits below need.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class PromotionError(Exception):
    """The file cannot be edited safely (unusual YAML layout, concurrent change...)."""


# --- versions and wording ------------------------------------------------------------------------


def bump_minor(version: str) -> str:
    """1.2.3 -> 1.3.0; a pre-release or build suffix is dropped (1.2.3-rc1 -> 1.3.0)."""
    match = re.match(SEMVER_PATTERN, version)
    if not match:
        raise PromotionError(f"metadata.version {version!r} is not semantic versioning (MAJOR.MINOR.PATCH)")
    major, minor, _ = (int(p) for p in match.groups()[:3])
    return f"{major}.{minor + 1}.0"


def change_text(status: ContractStatus, old: LifecycleStatus, new: LifecycleStatus) -> str:
    """E.g. `promoted DRAFT → ACTIVE_RUNTIME: 4/4 falsifiers discharged on cpu,cuda; 6/6 mutants killed`."""
    if STATUS_RANK[new] < STATUS_RANK[old]:
        verb = "demoted"
    elif new is LifecycleStatus.DRAFT_RED:
        verb = "marked red"
    else:
        verb = "promoted"
    return f"{verb} {old.value} → {new.value}: {status.evidence_summary()}"


# --- the text edit -------------------------------------------------------------------------------


def _mapping_get(node: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    found = None
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            found = (key_node, value_node)  # the last one wins, as in the loaded data
    return found


def _last_leaf_end(node: yaml.Node) -> int:
    """Offset just past the last character of a block collection's content."""
    while True:
        if isinstance(node, yaml.MappingNode) and not node.flow_style and node.value:
            node = node.value[-1][1]
        elif isinstance(node, yaml.SequenceNode) and not node.flow_style and node.value:
            node = node.value[-1]
        else:
            return node.end_mark.index


def _insertion_point(text: str, end: int) -> int:
    """Start of the line after the one holding offset `end` (trailing blank lines excluded)."""
    if end > 0 and text[end - 1] == "\n":  # block scalars end after their line breaks
        pos = end
        while pos > 0:
            prev = text.rfind("\n", 0, pos - 1) + 1
            if prev < pos and not text[prev:pos].strip():
                pos = prev
            else:
                break
        return pos
    newline = text.find("\n", end)
    return len(text) if newline == -1 else newline + 1


def _scalar_token(node: yaml.Node, value: str, what: str) -> tuple[int, int, str]:
    if not isinstance(node, yaml.ScalarNode) or node.style not in (None, "", "'", '"'):
        raise PromotionError(f"{what} is not a plain or quoted scalar; edit it by hand")
    quote = node.style or ""
    return node.start_mark.index, node.end_mark.index, f"{quote}{value}{quote}"


def rewrite(text: str, *, status: str, version: str, date: datetime.date, change: str) -> str:
    """The contract text with a new status and version and one more changelog entry."""
    newline = "\r\n" if "\r\n" in text else "\n"
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise PromotionError(f"not valid YAML: {exc}") from None
    if not isinstance(root, yaml.MappingNode):
        raise PromotionError("the top level is not a mapping")
    found = _mapping_get(root, "metadata")
    if found is None or not isinstance(found[1], yaml.MappingNode) or found[1].flow_style:
        raise PromotionError("metadata is not a block mapping; promotion edits block-style YAML only")
    metadata = found[1]
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) on the original text
    for key, value in (("status", status), ("version", version)):
        entry = _mapping_get(metadata, key)
        if entry is None:
            raise PromotionError(f"metadata.{key} is missing")
        edits.append(_scalar_token(entry[1], value, f"metadata.{key}"))

    quoted_change = json.dumps(change, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar

    def item(dash_col: int, key_col: int) -> list[str]:
        return [
            " " * dash_col + "- " + " " * (key_col - dash_col - 2) + f"version: {version}",
            " " * key_col + f"date: {date.isoformat()}",
            " " * key_col + f"change: {quoted_change}",
        ]

    def flow_item() -> str:
        return f"{{version: {version}, date: {date.isoformat()}, change: {quoted_change}}}"

    changelog = _mapping_get(metadata, "changelog")
    first_key_col = metadata.value[0][0].start_mark.column
    if changelog is None:
        lines = [" " * first_key_col + "changelog:", *item(first_key_col + 2, first_key_col + 4)]
        at = _insertion_point(text, _last_leaf_end(metadata))
    else:
        key_node, seq = changelog
        if not isinstance(seq, yaml.SequenceNode):
            raise PromotionError("metadata.changelog is not a list")
        if seq.flow_style and seq.value:  # [{...}, {...}]: one more item before the closing bracket
            close = seq.end_mark.index - 1
            if text[close] != "]":
                raise PromotionError("metadata.changelog: cannot find the end of its [...] list; edit it by hand")
            edits.append((close, close, ", " + flow_item()))
            lines, at = [], -1
        elif seq.flow_style:  # `changelog: []` becomes a block list
            col = key_node.start_mark.column
            start = seq.start_mark.index
            while start > 0 and text[start - 1] in " \t":
                start -= 1
            block = newline.join(item(col + 2, col + 4))
            edits.append((start, seq.end_mark.index, newline + block))
            lines, at = [], -1
        else:
            first, last = seq.value[0], seq.value[-1]
            if not isinstance(last, yaml.MappingNode):
                raise PromotionError("metadata.changelog entries are not mappings; edit it by hand")
            if last.flow_style:  # - {version: ..., date: ..., change: ...}
                lines = [" " * seq.start_mark.column + "- " + flow_item()]
            else:
                lines = item(seq.start_mark.column, first.start_mark.column)
            at = _insertion_point(text, _last_leaf_end(seq))
    if lines:
        insert = newline.join(lines) + newline
        if at == len(text) and text and not text.endswith("\n"):
            insert = newline + insert
        edits.append((at, at, insert))

    out = text
    for start, end, replacement in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out = out[:start] + replacement + out[end:]
    return out


def _verify(old_text: str, new_text: str, *, status: str, version: str, date: datetime.date, change: str) -> None:
    """Exactly status, version and one changelog entry changed; the contract still validates."""
    old = yaml.load(old_text, Loader=_LOADER)
    try:
        new = yaml.load(new_text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise PromotionError(f"the edited text is not valid YAML ({exc}); file left unchanged") from None
    expected = copy.deepcopy(old)
    meta = expected["metadata"]
    meta["status"], meta["version"] = status, version
    meta["changelog"] = [*(meta.get("changelog") or []), {"version": version, "date": date, "change": change}]
    if new != expected:
        raise PromotionError("the edit would change more than status, version and changelog "
                             "(unusual YAML layout: anchors, merge keys?); file left unchanged")
    try:
        before, after = Contract.model_validate(old), Contract.model_validate(new)
    except ValueError as exc:
        raise PromotionError(f"the edited contract does not validate: {exc}") from None
    if [f.definition_sha256() for f in before.falsification_tests] != [
        f.definition_sha256() for f in after.falsification_tests
    ]:
        raise PromotionError("the edit would change a falsifier definition; file left unchanged")


# --- planning --------------------------------------------------------------------------------------


@dataclass
class Outcome:
    contract: str
    path: str
    action: str  # promoted | unchanged | refused
    old: LifecycleStatus
    new: LifecycleStatus | None = None
    old_version: str = ""
    new_version: str = ""
    change: str = ""
    reasons: list[str] = field(default_factory=list)
    new_text: str | None = None
    file: Path | None = None
    regenerated: list[str] = field(default_factory=list)  # generated modules rewritten by apply

    def describe(self) -> str:
        head = f"{self.contract} ({self.path})"
        if self.action == "promoted":
            regenerated = "".join(f"; updated {path}" for path in self.regenerated)
            return f"{head}: {self.change}; version {self.old_version} → {self.new_version}{regenerated}"
        if self.action == "unchanged":
            return f"{head}: unchanged ({'; '.join(self.reasons)})"
        return f"{head}: refused\n" + "\n".join(f"    - {r}" for r in self.reasons)


def plan(
    loaded: LoadedContract,
    status: ContractStatus,
    *,
    today: datetime.date,
    allow_demote: bool = False,
    target: LifecycleStatus | None = None,
    explicit: bool = True,
) -> Outcome:
    """What promoting one contract would do. Nothing is written.

    `target` defaults to the status the evidence supports; a given target is refused when it
    claims more than the evidence. `explicit` is whether the user named this contract: a
    contract with nothing to promote is then refused (exit 1) instead of left unchanged.
    """
    declared = status.declared
    out = Outcome(status.id, loaded.display_path, "refused", declared, old_version=status.contract.metadata.version,
                  file=loaded.path)
    if declared in HAND_SET:
        out.action = "refused" if explicit else "unchanged"
        out.reasons.append(f"{declared.value} is set by hand; edit metadata.status to change it")
        return out
    new = target or status.evidence
    out.new = new
    if target is not None:
        reason = overclaim(dataclasses.replace(status, declared=target))
        if reason is not None:
            out.reasons.append(f"the evidence supports {status.evidence.value}, not {target.value}: {reason}")
            unproven = [f.id for f in status.falsifiers if f.unproven]
            if target is LifecycleStatus.ACTIVE_RUNTIME and unproven:
                out.reasons.append(
                    f"ACTIVE_RUNTIME needs every falsifier to declare a mutant and kill it; UNPROVEN: {', '.join(unproven)}"
                )
            return out
    if status.evidence is LifecycleStatus.DRAFT and new is not LifecycleStatus.DRAFT_RED:
        missing = "no fresh evidence: every falsifier is PENDING or STALE; run `pv run` first"
        if new is declared or STATUS_RANK[new] > STATUS_RANK[status.evidence]:
            out.action = "refused" if explicit else "unchanged"
            out.reasons.append(missing)
            return out
    if new is declared:
        out.action = "unchanged"
        out.reasons.append(f"already {declared.value}")
        return out
    if STATUS_RANK[new] < STATUS_RANK[declared] and not allow_demote:
        out.reasons.append(
            f"would demote {declared.value} → {new.value} ({' / '.join(status.blockers) or 'evidence'}); "
            "pass --allow-demote to record it"
        )
        return out

    out.new_version = bump_minor(status.contract.metadata.version)
    out.change = change_text(status, declared, new)
    raw = loaded.path.read_bytes()
    if hashlib.sha256(raw).hexdigest() != loaded.sha256:
        out.reasons.append("the file changed since it was loaded; run again")
        return out
    text = raw.decode("utf-8")
    try:
        new_text = rewrite(text, status=new.value, version=out.new_version, date=today, change=out.change)
        _verify(text, new_text, status=new.value, version=out.new_version, date=today, change=out.change)
    except PromotionError as exc:
        out.reasons.append(str(exc))
        return out
    out.action = "promoted"
    out.new_text = new_text
    return out


def apply(outcome: Outcome) -> None:
    """Write a planned promotion (atomically), then the contract's generated test module."""
    if outcome.action != "promoted" or outcome.new_text is None or outcome.file is None:
        return
    write_text(outcome.file, outcome.new_text)
    outcome.regenerated = regenerate(outcome.file)


def regenerate(contract_file: Path) -> list[str]:
    """Rewrite the generated module of `contract_file` if it is missing or stale; returns the
    paths written. Nothing happens when the contracts do not compile (`pv generate` reports it)
    or when a file pv did not generate is in the way (`pv generate --check` names it)."""
    from pv import codegen as generate
    from pv.config import load_workspace

    workspace = load_workspace(contract_file.parent)
    plan = generate.build_plan(workspace)
    if plan.invalid:
        return []
    mine = contract_file.resolve()
    written = []
    for target in [*plan.missing, *(t for t, _ in plan.stale)]:
        if target.loaded.path.resolve() == mine:
            write_text(target.path, target.text)
            written.append(workspace.rel(target.path))
    return written


def promote_entries(entries: list, loaded: list[LoadedContract], ids: set[str] | None, allow_demote: bool,
                    target: str | None, echo: Any) -> bool:
    """`pv status --promote`: plan and apply the promotion of each entry (pv status's report
    entries: `.path`, `.status`), saying what happened through `echo(text, err=...)`. Returns
    whether any was refused."""
    today = datetime.date.today()
    by_path = {lc.display_path: lc for lc in loaded}
    refused = False
    for e in entries:
        if ids and e.status.id not in ids:
            continue
        outcome = plan(by_path[e.path], e.status, today=today, allow_demote=allow_demote,
                       target=LifecycleStatus(target) if target else None, explicit=bool(ids))
        if outcome.action == "promoted":
            apply(outcome)
        refused |= outcome.action == "refused"
        echo(outcome.describe(), err=outcome.action == "refused")
    return refused
