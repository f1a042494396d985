"""Schema errors as diagnostics: a pydantic ValidationError becomes `path:line:col: PV2xx`
messages that name the key, the value found and what is allowed there."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from pv import keypaths as K
from pv.diagnostics import Diagnostic, did_you_mean
from pv.keypaths import inner_model
from pv.safe_yaml import LoadedContract, Loc, diag

_TYPE_HINTS = {
    "extra_forbidden": "unknown key; check the spelling against pv/schema/contract.schema.json",
    "missing": "add this key",
}


def _pattern_texts() -> dict[str, str]:
    from pv import schema as s

    return {
        s.CONTRACT_ID_PATTERN: "must be a kebab-case slug (lowercase letters, digits, single hyphens), "
        "e.g. apr-cuda-forward-parity",
        s.FALSIFIER_ID_PATTERN: "must look like FALSIFY-<WORDS>-NNN, e.g. FALSIFY-CUDA-FORWARD-PARITY-001",
        s.OBLIGATION_ID_PATTERN: "must look like <PREFIX>-<WORDS>-NNN in capitals, e.g. APCFP-BND-001",
        s.SEMVER_PATTERN: "is not a semantic version MAJOR.MINOR.PATCH, e.g. 1.0.0",
        s.CHECK_PATTERN: "must name module:function, e.g. falsifiers.loss:eval_loss",
        s.MUTANT_PATTERN: "must be a snake_case mutant name, e.g. cuda_drops_qkv_bias",
        s.EQUATION_NAME_PATTERN: "must be a snake_case name, e.g. val_loss_bound",
    }


PYTHON_TYPE_WORDS = {
    "str": "text", "int": "an integer", "float": "a number", "bool": "a boolean", "NoneType": "null",
    "list": "a list", "dict": "a mapping", "date": "a date", "datetime": "a timestamp",
}


def data_loc(data: Any, loc: Loc) -> tuple[Loc, bool]:
    """The part of a pydantic error location that exists in the data, and whether union-member
    tags (like 'str' or 'list[...]') had to be skipped to get there."""
    out: list[Any] = []
    skipped = False
    node = data
    for part in loc:
        if part == "[key]":
            out.append(part)
            break
        if isinstance(node, dict) and part in node:
            node = node[part]
            out.append(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            out.append(part)
        else:
            skipped = True
    return tuple(out), skipped


def schema_diagnostics(loaded: LoadedContract, error: ValidationError) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    patterns = _pattern_texts()
    seen_union: set[Loc] = set()
    errors = error.errors()
    # A union (params values) reports every member's complaint; keep only the deepest place.
    union_locs = set()
    for err in errors:
        loc, in_union = data_loc(loaded.data, tuple(err["loc"]))
        if in_union:
            union_locs.add(loc)
    for err in errors:
        raw_loc = tuple(err["loc"])
        kind = err["type"]
        if kind == "extra_forbidden":
            loc = raw_loc
            line, col = loaded.position(loc, key=True)
            known = _known_keys(loc[:-1])
            hint = did_you_mean(str(loc[-1]), known, _TYPE_HINTS[kind])
            out.append(diag(loaded.display_path, line, col, "PV201", f"unknown key {_dotted(loc)}", hint))
            continue
        if kind == "missing":
            loc = raw_loc
            line, col = loaded.position(loc[:-1])
            out.append(diag(loaded.display_path, line, col, "PV202", f"missing required key {_dotted(loc)}",
                             _TYPE_HINTS[kind]))
            continue
        loc, in_union = data_loc(loaded.data, raw_loc)
        if loc and loc[-1] == "[key]":
            loc = loc[:-1]
            line, col = loaded.position(loc, key=True)
            what = f"key {loc[-1]!r} of {_dotted(loc[:-1])}"
        else:
            line, col = loaded.position(loc)
            what = _dotted(loc)
        value = loaded.value_at(loc)
        code = "PV203" if kind.endswith("_type") or kind in ("model_type", "dict_type", "list_type") else "PV204"
        hint = ""
        if in_union:
            if loc in seen_union or any(len(u) > len(loc) and u[: len(loc)] == loc for u in union_locs):
                continue
            seen_union.add(loc)
            code = "PV203"
            allowed = ("params values are text, numbers, booleans, null, or a flat list/mapping of those"
                       if K.PARAMS.key in loc else "it matches none of the allowed forms")
            message = f"{what}: {_describe(value)} is not allowed here; {allowed}"
        elif kind == "enum":
            expected = (err.get("ctx") or {}).get("expected", "").replace("'", "")
            message = f"{what}: {value!r} is not one of {expected}"
        elif kind == "value_error":
            message = f"{what}: {err['msg'].removeprefix('Value error, ')}"
        elif kind == "string_pattern_mismatch":
            pattern = (err.get("ctx") or {}).get("pattern", "")
            explained = patterns.get(pattern)
            message = f"{what}: {value!r} " + (explained or f"does not match {pattern}")
        elif kind == "string_type" and isinstance(value, (int, float, bool)) and value is not None:
            message = f"{what}: expected text, got {_describe(value)}"
            hint = "quote the value, e.g. \"1.0.0\"" if isinstance(value, (int, float)) else "quote it"
        elif kind.endswith("_type") and value is not None:
            message = f"{what}: {err['msg'][0].lower()}{err['msg'][1:]}, got {_describe(value)}"
            if kind == "list_type" and isinstance(value, (str, int, float)):
                hint = f"write a list: [{value}]"
        else:
            message = f"{what}: {err['msg']}"
        out.append(diag(loaded.display_path, line, col, code, message, hint))
    return out


def _describe(value: Any) -> str:
    kind = PYTHON_TYPE_WORDS.get(type(value).__name__, type(value).__name__)
    if isinstance(value, (dict, list)):
        return kind
    text = repr(value)
    return f"{kind} {text if len(text) <= 40 else text[:37] + '...'}"


def _dotted(loc: Loc) -> str:
    text = ""
    for part in loc:
        index = isinstance(part, int) and not isinstance(part, bool)  # a boolean key (`on:`) is a key
        text += f"[{part}]" if index else (f".{part}" if text else str(part))
    return text


def _known_keys(loc: Loc) -> list[str]:
    """Field names allowed at `loc` in the schema (for 'did you mean')."""
    from pv import schema as s

    model: Any = s.Contract
    for part in loc:
        if isinstance(part, int):
            continue
        fld = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if fld is None:
            return []
        model = inner_model(fld.annotation)
        if model is None:
            return []
    return list(model.model_fields) if hasattr(model, "model_fields") else []
