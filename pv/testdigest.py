"""The digests of a generated falsifier test (pv.identity says what they are for and how a
record is judged by them).

    test4_sha256       what pv's plugin writes now: the module's statements other than test
                       functions, and the falsifier's own test, whole (_test4_parts)
    template_digests   the digests of the distinct templates of the module's test functions (a
                       record's `test_templates`)
    test_sha256        "test3", what records made before "test4" carry (_test3_parts)
    test2_sha256       "test2", older (_test_tree)
    legacy_test_sha256 `ast.dump`'s, older still, as the record's Python printed it

Each is of the syntax tree with what cannot change a verdict left out (_Own, _Shape); a module is
parsed and transformed once for all its tests' digests (_TestModule).
"""

from __future__ import annotations

import ast
import functools
import hashlib
from typing import Any, Mapping

# Keyword arguments whose literal values are prose or lists the definition does not cover.
_PROSE_KEYWORDS = frozenset({"if_fails", "contract_version", "devices", "subjects", "subject_sha256"})


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
    return _parts(source, function, templates_of_tests_only=False)


def _test4_parts(source: str | bytes, function: str) -> tuple[ast.Module, list[ast.AST]] | None:
    """What test `function`'s "test4" digest covers and what its record lists: (the module's
    statements other than test functions (_is_test_name), and the function itself, each whole
    (`_Own`) and in order; the template of every test function of the module, its own included,
    as in _test3_parts). None when the module does not parse or has no such function. (The
    definition; _TestModule gives the same texts.)"""
    return _parts(source, function, templates_of_tests_only=True)


def _parts(source: str | bytes, function: str, *,
           templates_of_tests_only: bool) -> tuple[ast.Module, list[ast.AST]] | None:
    """_test3_parts (every function definition is a template) and _test4_parts (only the test
    functions are; any other function counts whole, as pytest may call it by its name)."""
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
        is_template = is_def and (not templates_of_tests_only or _is_test_name(own.name))  # type: ignore[attr-defined]
        if is_template:
            template = _Shape().visit(shape)
            if _is_test_name(template.name):  # type: ignore[attr-defined]
                template.name = None  # type: ignore[attr-defined]  # a field left None is not in the text
            templates.append(template)
        if not is_template or own.name == function:  # type: ignore[attr-defined]
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
    was a fifth of a cold `pv validate` of this repository). The "test3" and "test4" texts join
    the same own texts; the module's set of templates (and their digests) is the same for every
    test of the module, so it is computed once."""

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
    """Whether a function is one of the module's tests: a name pv generates (`test_<falsifier>`),
    left out of its template (and in "test4" the other tests count by their templates alone).
    Any other function is kept whole in "test4" and by its name in its "test3" template: pytest
    calls some names itself (`setup_function` before every test of the module, `setup_module`
    before the first), so a test renamed to one is new code."""
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
