"""What ran is the contract's: the identity of a falsifier test and the definition it judged.

A ledger record says which falsifier it is evidence for (`falsifier_sha256`), but that hash is
what the test's marker *declares*. A generated test edited to judge a weaker prediction, or a
test file elsewhere carrying pv's marker, declares the contract's hash all the same. So a record
also carries what actually ran:

    test_node         `<path from the workspace root>::<pytest name>` of the test that ran
    test_sha256       `test_sha256(source, function)` of the test module as collected (read
                      before pytest imported it, so a module cannot rewrite itself to hide)
    judged_params     the params the harness called the check with (pv.harness.falsify)
    judged_tolerance  the tolerance numbers it passed (the override, without `source`)
    prediction        (an older field) the prediction the harness judged

`EvidenceCheck.refuses(record, falsifier)` says why a record does not count as evidence for the
falsifier's current definition: its test is not the module `pv generate` renders from the
current contract (rendered here from the contract, never imported), or the harness judged
something other than the contract's prediction, params or tolerance. Records made before pv
recorded these fields cannot show it, so they never count (STALE).

The digest ("test3") is of the module's syntax tree with what cannot change a verdict left
out: comments, docstrings, `if_fails=` and a tolerance's `source` text, the contract version
(promotion bumps it) and the device and subject lists (a PASS on cpu stays one when cuda is
added). It covers the module's statements other than function definitions (the imports,
`PV_FALSIFIER = ...`, anything added) and the falsifier's own test, whole and in order; and the
module's test functions only as the set of their distinct *templates* (a function's code with
its literals blanked and its `test_...` name left out), the falsifier's own among them.

Why the other tests count at all: they run in the same pytest session, so code added to one of
them (a body that patches the runtime or the harness) could change this falsifier's verdict; a
test whose code is no template of the rendered module is a change. Why only as a set of
templates: a falsifier added to the contract (or removed) adds a test (or removes one), and
when its template is one the module has anyway (the same check called the same way as another
falsifier's), no code runs that did not run before: the other falsifiers' records keep
counting, and only the new falsifier's cells are owed. A template keeps what is behaviour: the
check a test imports and calls and the form of the call (subjects, runtimes, timing). So a
falsifier added with a check no other test of its module calls is a new template, and the
module's other records need a re-run.

Records made before "test3" carry the "test2" digest (test2_sha256: the same, but every other
test function by its shape in its place and with its name, so a falsifier added to the contract
changed every other falsifier's digest), older ones `ast.dump`'s (legacy_test_sha256).
`refuses` accepts those when they are the digest of the module rendered now, so each such record
counts exactly when it counted before; pv's plugin writes "test3".
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

from pv.ledger import LedgerRecord, _sanitize

# Keyword arguments whose literal values are prose or lists the definition does not cover.
_PROSE_KEYWORDS = frozenset({"if_fails", "contract_version", "devices", "subjects", "subject_sha256"})
NO_IDENTITY = "recorded before pv recorded what ran (no test identity)"
RENDERS_OTHER = "the test that ran is not what `pv generate` renders from the current contract"
SIBLING_OTHER = "a sibling test that ran is not rendered from the current contract"


def _is_prose(node: ast.stmt) -> bool:
    """A bare string statement (a docstring): it runs nothing."""
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


class _Own(ast.NodeTransformer):
    """The falsifier's own test: everything but prose."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.body = [s for s in node.body if not _is_prose(s)] or [ast.Pass()]
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_keyword(self, node: ast.keyword) -> ast.AST:
        if node.arg in _PROSE_KEYWORDS and _constant_only(node.value):
            node.value = ast.Constant(None)
        elif node.arg == "tolerance" and isinstance(node.value, ast.Dict):
            for i, key in enumerate(node.value.keys):
                if isinstance(key, ast.Constant) and key.value == "source" and _constant_only(node.value.values[i]):
                    node.value.values[i] = ast.Constant(None)
        return self.generic_visit(node)


class _Shape(_Own):
    """Another falsifier's test: its code, every literal blanked."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.Constant(None)

    def generic_visit(self, node: ast.AST) -> ast.AST:
        node = super().generic_visit(node)
        if isinstance(node, (ast.Dict, ast.List, ast.Tuple, ast.Set)) and _constant_only(node):
            return ast.Constant(None)  # a list of three devices is the same shape as one of one
        return node


def _constant_only(node: ast.AST | None) -> bool:
    if node is None or isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Dict):
        return all(_constant_only(k) and _constant_only(v) for k, v in zip(node.keys, node.values))
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_constant_only(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _constant_only(node.operand)
    return False


def _test_tree(source: str | bytes, function: str) -> ast.Module | None:
    """The part of a generated module's `source` that test `function`'s "test2" digest covers
    (the digest records made before "test3" carry); None when the module does not parse or has
    no such function. (The definition of what that digest covers; the digests themselves come
    from _TestModule, which gives the same texts.)"""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    body: list[ast.stmt] = []
    found = False
    for node in tree.body:
        if _is_prose(node):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != function:
            node = _Shape().visit(node)
        else:
            found = found or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function)
            node = _Own().visit(node)
        body.append(node)
    return ast.Module(body=body, type_ignores=[]) if found else None


def _test3_parts(source: str | bytes, function: str) -> tuple[ast.Module, list[ast.AST]] | None:
    """What test `function`'s "test3" digest covers: (the module's statements that are not
    function definitions, and the function itself, each whole (`_Own`) and in order; the
    template of every function of the module, its own included: its shape (`_Shape`) with its
    name left out when it is a test's, _is_test_name). None when the module does not parse or has
    no such function. (The definition; _TestModule gives the same texts.) The digest covers the
    templates as a set, so the tests that share one count once, and their number, names and
    order do not count."""
    try:
        own_tree, shape_tree = ast.parse(source), ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    body: list[ast.stmt] = []
    templates: list[ast.AST] = []
    for own, shape in zip(own_tree.body, shape_tree.body):
        if _is_prose(own):
            continue
        is_def = isinstance(own, (ast.FunctionDef, ast.AsyncFunctionDef))
        if is_def:
            template = _Shape().visit(shape)
            if _is_test_name(template.name):  # type: ignore[attr-defined]
                template.name = None  # type: ignore[attr-defined]  # a field left None is not in the text
            templates.append(template)
        if not is_def or own.name == function:  # type: ignore[attr-defined]
            body.append(_Own().visit(own))
    if not any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function for node in body):
        return None
    return ast.Module(body=body, type_ignores=[]), templates


def _test4_parts(source: str | bytes, function: str) -> tuple[ast.Module, list[ast.AST]] | None:
    """What test `function`'s "test4" digest covers and what its record lists: (the module's
    statements other than test functions (_is_test_name), and the function itself, each whole
    (`_Own`) and in order; the template of every test function of the module, its own included,
    as in _test3_parts). None when the module does not parse or has no such function. (The
    definition; _TestModule gives the same texts.)"""
    try:
        own_tree, shape_tree = ast.parse(source), ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    body: list[ast.stmt] = []
    templates: list[ast.AST] = []
    for own, shape in zip(own_tree.body, shape_tree.body):
        if _is_prose(own):
            continue
        is_test = isinstance(own, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_test_name(own.name)
        if is_test:
            template = _Shape().visit(shape)
            template.name = None  # type: ignore[attr-defined]
            templates.append(template)
        if not is_test or own.name == function:  # type: ignore[attr-defined]
            body.append(_Own().visit(own))
    if not any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function for node in body):
        return None
    return ast.Module(body=body, type_ignores=[]), templates


class _TestModule:
    """A generated module, parsed once for the digests of all its tests. _test_tree's tree of a
    test is the module's statements, each either as its own (`_Own`) or, for another test
    function, as its shape (`_Shape`); each statement's text is the same whichever test's tree
    holds it. So every statement is transformed once each way, its texts are computed once, and
    a test's text is theirs joined (parsing and pruning the module again for each of its tests
    was a fifth of a cold `pv validate` of this repository). The "test3" text joins the same own
    texts and the module's set of templates, which is the same for every test of the module."""

    def __init__(self, own_tree: ast.Module, shape_tree: ast.Module):  # two parses of one source
        self.names: list[str | None] = []  # the function each statement defines (None: not a def)
        self.own: list[ast.AST] = []
        self.shape: list[ast.AST | None] = []
        for own, shape in zip(own_tree.body, shape_tree.body):
            if _is_prose(own):
                continue
            is_def = isinstance(own, (ast.FunctionDef, ast.AsyncFunctionDef))
            self.names.append(own.name if is_def else None)  # type: ignore[attr-defined]
            self.own.append(_Own().visit(own))
            self.shape.append(_Shape().visit(shape) if is_def else None)
        self._texts: dict[tuple[str, int, bool], str] = {}
        self._templates: str | None = None
        self._template_digests: tuple[str, ...] | None = None

    def _text(self, kind: str, index: int, own: bool, text_of: Any) -> str:
        key = (kind, index, own)
        if key not in self._texts:
            self._texts[key] = text_of(self.own[index] if own else self.shape[index])
        return self._texts[key]

    def texts(self, function: str, kind: str, text_of: Any) -> list[str] | None:
        """The text (`text_of` a statement, cached under `kind`) of each statement of test
        `function`'s tree; None when the module has no such function."""
        if function not in self.names:
            return None
        return [self._text(kind, i, name is None or name == function, text_of) for i, name in enumerate(self.names)]

    def test3_text(self, function: str) -> str | None:
        """The canonical text "test3" digests (_test3_parts): the statements counted whole, then
        the sorted distinct templates; None when the module has no such function."""
        from pv.codebind import _canonical as canonical_text

        if function not in self.names:
            return None
        whole = [self._text("canonical", i, True, canonical_text)  # the texts test2 joins
                 for i, name in enumerate(self.names) if name is None or name == function]
        if self._templates is None:
            self._templates = "".join(sorted({
                _template_text(self._text("canonical", i, False, canonical_text), self.shape[i])
                for i, name in enumerate(self.names) if name is not None}))
        # the canonical texts of ast.Module(body=<whole>) and of the list of templates
        return "Module(body=[" + "".join(whole) + "])templates=[" + self._templates + "]"

    def test4_text(self, function: str) -> str | None:
        """The canonical text "test4" digests (_test4_parts): the module's statements other than
        test functions, and test `function` itself, each whole and in order; None when the module
        has no such function."""
        from pv.codebind import _canonical as canonical_text

        if function not in self.names:
            return None
        whole = [self._text("canonical", i, True, canonical_text) for i, name in enumerate(self.names)
                 if name is None or name == function or not _is_test_name(name)]
        return "Module(body=[" + "".join(whole) + "])"

    def template_digests(self) -> tuple[str, ...]:
        """The sorted distinct digests of the templates of the module's test functions."""
        from pv.codebind import _canonical as canonical_text

        if self._template_digests is None:
            self._template_digests = tuple(sorted({
                _template_digest(_template_text(self._text("canonical", i, False, canonical_text), self.shape[i]))
                for i, name in enumerate(self.names) if name is not None and _is_test_name(name)}))
        return self._template_digests


def _template_digest(text: str) -> str:
    """The digest of a template's canonical text, as records list them (`test_templates`)."""
    return hashlib.sha256(("template:" + text).encode("utf-8", "surrogatepass")).hexdigest()


def _is_test_name(name: str) -> bool:
    """Whether a function's name is left out of its template: a name pv generates
    (`test_<falsifier>`). Any other is kept: pytest calls some names itself (`setup_function`
    before every test of the module, `setup_module` before the first), so a test renamed to one
    is new code."""
    return name.startswith("test_")


def _template_text(shape_text: str, function: Any) -> str:
    """The canonical text of `function`'s template, from the text of its shape (`shape_text`):
    the same text with the name left out when _is_test_name. `name` is the first field of a
    function definition on every Python, so the shape's text is `<Type>(name=<repr>,<the rest>`
    (pv.astcanon); reading the template's off it costs no second walk of the tree
    (tests/test_identity.py compares it with the text of _test3_parts' templates)."""
    if not _is_test_name(function.name):
        return shape_text
    head = type(function).__name__ + "("
    named = f"{head}name={function.name!r},"
    assert shape_text.startswith(named), "pv.astcanon writes a function's name first"
    return head + shape_text[len(named):]


@functools.lru_cache(maxsize=64)
def _test_module(source: str | bytes) -> _TestModule | None:
    """The module of `source` (None when it does not parse), once per distinct source."""
    try:
        own_tree, shape_tree = ast.parse(source), ast.parse(source)  # each is transformed in place
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return _TestModule(own_tree, shape_tree)


def test4_sha256(source: str | bytes, function: str) -> str | None:
    """The digest of test `function` in a generated module's `source`, as records carry it now:
    "test4:" + pv.codebind's canonical text (node types and non-empty fields, the same on every
    Python) of the statements _test4_parts counts whole. None when the module does not parse or
    has no such function."""
    module = _test_module(source)
    text = None if module is None else module.test4_text(function)
    if text is None:
        return None
    return hashlib.sha256(("test4:" + text).encode("utf-8", "surrogatepass")).hexdigest()


def template_digests(source: str | bytes) -> list[str] | None:
    """The sorted distinct digests of the templates of the test functions of a generated
    module's `source` (a record's `test_templates`); None when the module does not parse."""
    module = _test_module(source)
    return None if module is None else list(module.template_digests())


def test_sha256(source: str | bytes, function: str) -> str | None:
    """The "test3" digest of test `function` in a generated module's `source`, the one records
    made before "test4" carry: "test3:" + pv.codebind's canonical text of what _test3_parts
    covers. None when the module does not parse or has no such function."""
    module = _test_module(source)
    text = None if module is None else module.test3_text(function)
    if text is None:
        return None
    return hashlib.sha256(("test3:" + text).encode("utf-8", "surrogatepass")).hexdigest()


def test2_sha256(source: str | bytes, function: str) -> str | None:
    """The digest records made before "test3" carry for the same test: "test2:" + the canonical
    text of _test_tree (every other test function by its shape, in place, with its name). None
    when the module does not parse or has no such function."""
    from pv.codebind import _canonical as canonical_text

    module = _test_module(source)
    texts = None if module is None else module.texts(function, "canonical", canonical_text)
    if texts is None:
        return None
    # the canonical text of ast.Module(body=<the statements>, type_ignores=[])
    text = "Module(body=[" + "".join(texts) + "])"
    return hashlib.sha256(("test2:" + text).encode("utf-8", "surrogatepass")).hexdigest()


# Records made before the "test2" digest carry sha256(ast.dump(tree)), whose text depends on the
# Python that made them: 3.12 added an always-empty `type_params` to functions and classes.
_LEGACY_EXTRA_FIELDS: dict[tuple[int, int], dict[str, tuple[str, ...]]] = {
    (3, 12): {"FunctionDef": ("type_params",), "AsyncFunctionDef": ("type_params",), "ClassDef": ("type_params",)},
}


def _legacy_dump(node: Any, extra: Mapping[str, tuple[str, ...]]) -> str:
    """`ast.dump(node)` as printed by the Python whose extra fields are `extra`: CPython's
    algorithm of 3.9-3.12 (Lib/ast.py, annotate_fields=True, no attributes)."""
    if isinstance(node, ast.AST):
        cls = type(node)
        args = []
        for name in node._fields:
            try:
                value = getattr(node, name)
            except AttributeError:
                continue
            if value is None and getattr(cls, name, ...) is None:
                continue
            args.append(f"{name}={_legacy_dump(value, extra)}")
        args += [f"{name}=[]" for name in extra.get(cls.__name__, ()) if name not in node._fields]
        return f"{cls.__name__}({', '.join(args)})"
    if isinstance(node, list):
        return "[" + ", ".join(_legacy_dump(item, extra) for item in node) + "]"
    return repr(node)


def legacy_test_sha256(source: str | bytes, function: str, python: str | None) -> str | None:
    """The digest a record made before "test2" digests carries for the same test, as the record's
    Python (`python`, e.g. "3.12.3") computed it with ast.dump; None for a Python it cannot be."""
    try:
        version = tuple(int(part) for part in str(python).split(".")[:2])
    except ValueError:
        return None
    if len(version) != 2 or not (3, 9) <= version <= (3, 12):
        return None
    module = _test_module(source)
    extra = _LEGACY_EXTRA_FIELDS.get(version, {})  # type: ignore[call-overload]
    texts = None if module is None else module.texts(
        function, f"legacy{sorted(extra.items())}", lambda node: _legacy_dump(node, extra))
    if texts is None:
        return None
    # _legacy_dump of ast.Module(body=<the statements>, type_ignores=[])
    text = "Module(body=[" + ", ".join(texts) + "], type_ignores=[])"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def tolerance_numbers(tolerance: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A tolerance override as the harness received it, without its prose (`source`) and unset
    dtypes: what the definition hash covers."""
    if tolerance is None:
        return None
    if not isinstance(tolerance, Mapping):
        return {"?": repr(tolerance)}
    return {str(k): v for k, v in tolerance.items() if k != "source" and v is not None}


def _canonical(value: Any) -> str:
    return json.dumps(_sanitize(value), sort_keys=True, separators=(",", ":"), default=repr)


def defined_texts(falsifier: Any) -> tuple[str, str, str]:
    """The canonical texts of what the falsifier defines for the harness to judge: its
    prediction, its params and its tolerance numbers (judged_differs compares a record's to them)."""
    tolerance = None
    if falsifier.tolerance is not None:
        tolerance = tolerance_numbers(falsifier.tolerance.model_dump(mode="json"))
    return _canonical(falsifier.prediction), _canonical(falsifier.params), _canonical(tolerance or None)


def judged_differs(record: LedgerRecord, falsifier: Any, defined: tuple[str, str, str] | None = None) -> str | None:
    """Why what the harness judged is not the falsifier's current definition (None: it is).
    A PASS or FAIL always comes from the harness judging; one that does not say what it judged
    cannot show it judged the contract's prediction. `defined`: defined_texts(falsifier), where
    the caller keeps them (EvidenceCheck judges hundreds of records of one falsifier)."""
    if record.judged_params is None:
        if record.verdict.value in ("PASS", "FAIL"):
            return "the record does not say what the harness judged"
        return None  # an ERROR or SKIP before the check ran: the test identity is what binds it
    if defined is None:
        defined = defined_texts(falsifier)
    differs = [name for name, ran, text in zip(
        ("prediction", "params", "tolerance"),
        (record.prediction, record.judged_params, record.judged_tolerance or None), defined,
    ) if _canonical(ran) != text]
    if differs:
        return f"the harness judged another {' and '.join(differs)} than the contract's"
    return None


class EvidenceCheck:
    """Whether a record's code is the tree's (`changes`, pv.codebind.TreeDigests) and whether
    the record ran the contract's generated test on the contract's definition (`refuses`).
    pv.lifecycle takes it as its `code` argument."""

    def __init__(self, workspace: Any, loaded: list[Any], tree: Any = None, modules: Any = None):
        """`modules`: the pv.staticcheck.ModuleIndex that reads the mutants module (a caller
        judging many contracts in one run shares one; by default a fresh one)."""
        from pv.codebind import TreeDigests

        self.workspace = workspace
        self.tree = TreeDigests(workspace.root) if tree is None else tree
        self._modules = modules
        self._loaded = {lc.contract.metadata.id: lc for lc in loaded if getattr(lc, "contract", None) is not None}
        self._rendered: dict[str, str | None] = {}
        self._expected: dict[tuple[str, str], tuple[str, str | None] | None] = {}
        # (contract, falsifier, the record's Python; None: "test2") -> the digest an older record carries
        self._older_digests: dict[tuple[str, str, str | None], str | None] = {}
        # (contract, falsifier) -> ("test4" digest, the module's template digests) rendered now
        self._test4: dict[tuple[str, str], tuple[str | None, frozenset[str]]] = {}
        self._planted: dict[str, tuple[str, ...] | None] | None = None  # mutant -> its `runtimes=`
        # id of a falsifier -> (the falsifier, kept so that its id stays its own; its defined_texts)
        self._defined: dict[int, tuple[Any, tuple[str, str, str]]] = {}

    def changes(self, recorded: Mapping[str, str] | None) -> tuple[str, ...]:
        return self.tree.changes(recorded)

    def record_changes(self, record: LedgerRecord) -> tuple[str, ...]:
        return self.tree.record_changes(record)

    def mutant_meets(self, mutant: str, runtime: str | None) -> bool:
        """Whether the bug `mutant` is planted in `runtime`, a falsifier cell's (pv.mutation.meets;
        read from the mutants module without importing it). A name the module does not declare
        is judged by no runtime (pv validate reports it, PV309)."""
        from pv import mutation

        if self._planted is None:  # read as pv validate reads it (pv.cache keeps it by the files' bytes)
            from pv.staticcheck import ModuleIndex

            module = self.workspace.mutants_module
            index = self._modules if self._modules is not None else ModuleIndex(self.workspace.root)
            found = index.mutant_runtimes(module) if module else None
            self._planted = {name: runtimes for name, (runtimes, _) in (found or {}).items()}
        if mutant not in self._planted:
            return True
        table = self.workspace.runtimes
        return mutation.meets(mutation.planted_in(self._planted[mutant], table), runtime, table)

    def __getattr__(self, name: str) -> Any:  # anything else the tree's digests answer
        if name == "tree":
            raise AttributeError(name)
        return getattr(self.tree, name)

    def _render(self, contract_id: str) -> str | None:
        if contract_id not in self._rendered:
            from pv import codegen

            loaded = self._loaded.get(contract_id)
            try:
                self._rendered[contract_id] = None if loaded is None else codegen.render(loaded, self.workspace)
            except Exception:  # noqa: BLE001 - a contract pv cannot render has no generated test to match
                self._rendered[contract_id] = None
        return self._rendered[contract_id]

    def expected(self, contract_id: str, falsifier_id: str) -> tuple[str, str | None] | None:
        """(node prefix `<generated module>::<function>`, test digest) of the falsifier's generated
        test as `pv generate` renders it now; None when the contract is unknown here."""
        key = (contract_id, falsifier_id)
        if key not in self._expected:
            from pv.codegen import function_name, module_name

            text = self._render(contract_id)
            if text is None:
                self._expected[key] = None
            else:
                function = function_name(falsifier_id)
                module = self.workspace.rel(self.workspace.generated_dir / module_name(contract_id))
                self._expected[key] = (f"{module}::{function}", test_sha256(text, function))
        return self._expected[key]

    def current(self, contract_id: str, falsifier_id: str) -> tuple[str | None, frozenset[str]]:
        """("test4" digest, the digests of the module's test templates) of the falsifier's
        generated test as `pv generate` renders it now ((None, empty) when it cannot be rendered)."""
        key = (contract_id, falsifier_id)
        if key not in self._test4:
            from pv.codegen import function_name

            text = self._render(contract_id)
            function = function_name(falsifier_id)
            self._test4[key] = ((None, frozenset()) if text is None else
                                (test4_sha256(text, function), frozenset(template_digests(text) or ())))
        return self._test4[key]

    def _older(self, record: LedgerRecord, falsifier_id: str, test2: bool) -> str | None:
        """The digest a record made before "test3" digests carries if it ran the current generated
        test: its "test2" digest (`test2`), or, older still, ast.dump's as the record's Python
        computed it. Asked only of a record whose digest is not the current one."""
        python = (record.versions or {}).get("python")
        key = (record.contract, falsifier_id, None if test2 else str(python))
        if key not in self._older_digests:
            from pv.codegen import function_name

            text = self._render(record.contract)
            function = function_name(falsifier_id)
            self._older_digests[key] = (None if text is None else test2_sha256(text, function) if test2
                                        else legacy_test_sha256(text, function, python))
        return self._older_digests[key]

    def refuses(self, record: LedgerRecord, falsifier: Any) -> str | None:
        """Why `record` is not evidence for `falsifier`'s current definition (None: it is)."""
        if record.test_sha256 is None or record.test_node is None:
            return NO_IDENTITY
        expected = self.expected(record.contract, falsifier.id)
        if expected is None:
            return "the contract's generated test cannot be rendered to compare with"
        prefix, digest = expected
        node = record.test_node
        if not (node == prefix or node.startswith(prefix + "[")):
            return f"not run by the contract's generated test ({node} ran, not {prefix})"
        if record.test_templates is not None:  # "test4": its own test whole, its siblings a subset
            own, templates = self.current(record.contract, falsifier.id)
            if record.test_sha256 != own:
                return RENDERS_OTHER
            if not templates.issuperset(record.test_templates):
                return SIBLING_OTHER
        # Records made before "test4" carry an older digest of the same test: "test3", else older
        # still (computed only when "test3" differs)
        elif (record.test_sha256 != digest and record.test_sha256 != self._older(record, falsifier.id, test2=True)
                and record.test_sha256 != self._older(record, falsifier.id, test2=False)):
            return RENDERS_OTHER
        if id(falsifier) not in self._defined:
            self._defined[id(falsifier)] = (falsifier, defined_texts(falsifier))
        return judged_differs(record, falsifier, self._defined[id(falsifier)][1])


def ran_test(workspace: Any, path: Path, name: str, function: str, contract: str | None, falsifier: str | None,
             source: str | None) -> tuple[str | None, str | None, list[str] | None, str | None]:
    """(test_node, test_sha256 ("test4"), test_templates, why it is not recorded) for a
    falsifier test pytest ran from `path` (`name`: its pytest name; `function`: its function;
    `source`: the file as collected, None if pv's plugin did not see it collected). Only the
    generated module of the marker's contract, and the function of the marker's falsifier, may
    record evidence."""
    from pv.codegen import function_name, module_name

    node = f"{workspace.rel(path)}::{name}"
    if contract is None or falsifier is None:
        return node, None, None, "its marker names no contract or falsifier"
    try:
        expected_path = workspace.generated_dir / module_name(contract)
        expected_function = function_name(falsifier)
    except ValueError:
        return node, None, None, "its marker names no valid contract or falsifier"
    try:
        same_file = Path(path).resolve() == expected_path.resolve()
    except (OSError, RuntimeError):
        same_file = False
    if not same_file:
        return node, None, None, (f"{workspace.rel(path)} is not the generated test module of contract "
                                  f"{contract} ({workspace.rel(expected_path)})")
    if function != expected_function:
        return node, None, None, f"{function} is not the generated test of {falsifier} ({expected_function})"
    if source is None:
        return node, None, None, "pv's plugin did not see the module collected, so cannot digest what ran"
    digest = test4_sha256(source, function)
    if digest is None:
        return node, None, None, "the module that ran has no such test function"
    return node, digest, template_digests(source), None


def cells_option(selected: Any) -> str:
    """`--pv-cells` for pv's plugin: the (contract, falsifier, device, subject) cells `pv run`
    selected, so that no other test's outcome is recorded (extra paths given after `--`)."""
    return json.dumps(sorted({(s.contract, s.falsifier, s.device, s.subject) for s in selected},
                             key=lambda cell: tuple("" if part is None else part for part in cell)))
