"""Contract key paths, named once and checked against the schema.

The checks beyond the schema (pv.crosscheck, pv.dialect) read the plain YAML data, so that a
contract the schema rejects still gets its other problems reported; they name keys as
`KeyPath`s from here instead of raw strings. Every path is resolved against the pydantic
models of pv.schema when this module is imported: renaming a field there breaks the import
(and with it every test) instead of leaving a check that silently looks at a key no contract
has any more.

    PREDICTION.at(3)            -> ("falsification_tests", 3, "prediction")  (a Loc for positions)
    PREDICTION.key              -> "prediction"  (to read it from the falsifier's mapping)
    str(PREDICTION)             -> "falsification_tests[].prediction"
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from pv.schema import Contract


class _Each:
    """Placeholder for any position of a list or any name of a mapping."""

    def __repr__(self) -> str:
        return "EACH"


EACH: Any = _Each()


@dataclass(frozen=True)
class KeyPath:
    parts: tuple[Any, ...]

    @property
    def key(self) -> str:
        """The last key (the name of the field in its mapping)."""
        return next(p for p in reversed(self.parts) if isinstance(p, str))

    def at(self, *fill: Any) -> tuple[Any, ...]:
        """The path with each EACH replaced, in order, by `fill` (list positions, mapping names)."""
        values = iter(fill)
        loc = tuple(next(values) if p is EACH else p for p in self.parts)
        if next(values, None) is not None:
            raise ValueError(f"{self} takes {sum(p is EACH for p in self.parts)} position(s), got {len(fill)}")
        return loc

    def __str__(self) -> str:
        text = ""
        for part in self.parts:
            text += "[]" if part is EACH else (f".{part}" if text else part)
        return text


def _container_item(annotation: Any) -> Any:
    """The item type of list[X] / dict[str, X] (through Optional and Annotated), else None."""
    origin = typing.get_origin(annotation)
    if origin is list:
        return typing.get_args(annotation)[0]
    if origin is dict:
        return typing.get_args(annotation)[1]
    for arg in typing.get_args(annotation):
        found = _container_item(arg)
        if found is not None:
            return found
    return None


def inner_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (Optional, Annotated, list, dict), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = inner_model(arg)
        if found is not None:
            return found
    return None


def _path(*parts: Any) -> KeyPath:
    """A KeyPath, after checking that every step exists in the models."""
    annotation: Any = Contract
    for i, part in enumerate(parts):
        where = KeyPath(parts[: i + 1])
        if part is EACH:
            annotation = _container_item(annotation)
            if annotation is None:
                raise AssertionError(f"pv.keypaths: {where} steps into something that is not a list or mapping")
            continue
        if _container_item(annotation) is not None:
            raise AssertionError(f"pv.keypaths: {where}: a list or mapping is not a field of pv.schema's models "
                                 "(a position, EACH, must come first)")
        model = inner_model(annotation)
        if model is None or part not in model.model_fields:
            raise AssertionError(f"pv.keypaths: {where} is not a field of pv.schema's models")
        annotation = model.model_fields[part].annotation
    return KeyPath(tuple(parts))


METADATA = _path("metadata")
CONTRACT_ID = _path("metadata", "id")
CONTRACT_VERSION = _path("metadata", "version")
STATUS = _path("metadata", "status")
DEPENDS_ON = _path("metadata", "depends_on")

EQUATIONS = _path("equations")
FORMULA = _path("equations", EACH, "formula")

OBLIGATIONS = _path("proof_obligations")
OBLIGATION_ID = _path("proof_obligations", EACH, "id")
OBLIGATION_FALSIFIERS = _path("proof_obligations", EACH, "falsifiers")

FALSIFIERS = _path("falsification_tests")
FALSIFIER_ID = _path("falsification_tests", EACH, "id")
PREDICTION = _path("falsification_tests", EACH, "prediction")
CHECK = _path("falsification_tests", EACH, "check")
PARAMS = _path("falsification_tests", EACH, "params")
SUBJECTS = _path("falsification_tests", EACH, "subjects")
RUNTIMES = _path("falsification_tests", EACH, "runtimes")
TOLERANCE = _path("falsification_tests", EACH, "tolerance")
MUTANTS = _path("falsification_tests", EACH, "mutants")
TIMING_OBSERVATIONS = _path("falsification_tests", EACH, "timing_observations")
