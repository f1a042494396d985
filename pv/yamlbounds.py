"""Bounds on hostile YAML, checked before a contract file's data is built (pv.safe_yaml): the
expanded size of an alias graph ("billion laughs", recursive aliases) and the nesting depth,
measured without recursion before libyaml's C composer, which recurses on the C stack, sees the
text."""

from __future__ import annotations

from typing import Any

import yaml

MAX_NODES = 100_000  # after alias expansion; real contracts have a few hundred
MAX_DEPTH = 64  # nesting of collections; real contracts are about 6 deep
TOO_DEEP_HINT = "contracts are a few levels deep; this file is not one"
BOMB_HINT = "this looks like an alias bomb ('billion laughs'); contracts need no such nesting"

# libyaml's parser is ~15x faster than the pure-Python one; both give the same events.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Budget(Exception):
    """A bound exceeded: the message, a hint, where (a YAML mark) and the diagnostic code."""

    def __init__(self, message: str, hint: str, mark: Any = None, code: str = "PV103"):
        super().__init__(message)
        self.message, self.hint, self.mark, self.code = message, hint, mark, code


def expanded_size(root: yaml.Node, limit: int = MAX_NODES) -> int:
    """Number of nodes once every alias is expanded, computed on the node graph (each distinct
    node once). Raises Budget when over `limit`, when nesting is deeper than MAX_DEPTH, or
    when an alias contains itself."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        known = sizes.get(key)
        if known is not None:
            return known
        cls = node.__class__
        if cls is yaml.ScalarNode:
            return 1
        if key in active:
            raise Budget("recursive YAML alias (a collection that contains itself)",
                          "remove the alias; contracts never need self-reference", node.start_mark)
        if depth > MAX_DEPTH:
            raise Budget(f"YAML nests more than {MAX_DEPTH} levels deep",
                          TOO_DEEP_HINT, node.start_mark, "PV108")
        total = 1
        active.add(key)
        if cls is yaml.MappingNode:
            for k, v in node.value:
                total += size(k, depth + 1) + size(v, depth + 1)
                if total > limit:
                    break
        else:
            for item in node.value:
                total += size(item, depth + 1)
                if total > limit:
                    break
        active.discard(key)
        if total > limit:
            raise Budget(f"YAML aliases expand to more than {limit:,} nodes", BOMB_HINT, node.start_mark)
        sizes[key] = total
        return total

    return size(root, 1)


C_COMPOSER_SAFE_DEPTH = 1000  # libyaml's composer recurses on the C stack: it crashed near 20,000


def depth_bound(text: str) -> int:
    """A cheap upper bound on collection nesting: every collection, flow or block, is opened or
    keyed by at least one of the characters [ { - : ? (str.count runs at C speed)."""
    return sum(text.count(c) for c in "[{-:?")


def parser_nesting_limit(exc: BaseException) -> bool:
    """Whether a YAML error is the parser's own nesting limit. libyaml 0.2.6 (bundled with
    PyYAML 6.0.4) stops at 1,000 flow levels ("while increasing flow level exceeded maximum
    nesting depth"), and its scanner reads a flow collection ahead before the first event is
    out, so that error can come before MAX_DEPTH is seen. Any such limit is far above
    MAX_DEPTH: it means "nests too deeply", never a syntax error."""
    return isinstance(exc, yaml.YAMLError) and "nesting depth" in str(getattr(exc, "problem", "") or "")


def nesting_depth(text: str) -> tuple[int, Any]:
    """Exact collection nesting depth from the parser's events (iterative, no recursion), and
    the mark where it first exceeds MAX_DEPTH (or None). When the parser's own nesting limit
    stops it first, the depth is past MAX_DEPTH and the mark is where the parser stopped."""
    depth = deepest = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            cls = event.__class__
            if cls is yaml.SequenceStartEvent or cls is yaml.MappingStartEvent:
                depth += 1
                if depth > deepest:
                    deepest = depth
                    if depth > MAX_DEPTH:
                        return depth, event.start_mark
            elif cls is yaml.SequenceEndEvent or cls is yaml.MappingEndEvent:
                depth -= 1
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if not parser_nesting_limit(exc) or mark is None:
            raise
        return max(deepest, MAX_DEPTH) + 1, mark
    return deepest, None
