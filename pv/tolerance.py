"""Per-dtype comparison tolerances: torch.testing's defaults, overridable per falsifier.

The defaults are torch.testing.assert_close's table, kept here as plain data so that neither
`pv generate` nor the harness imports torch. A falsifier's YAML `tolerance:` overrides single
dtypes (and must say where its numbers come from: `source:`); the merged table reaches a check
as `tolerance=` only if the check's signature has a parameter of that name.
"""

from __future__ import annotations

import copy
import inspect
import math
from typing import Any, Callable, Mapping

# torch.testing._comparison's default_tolerances (rtol, atol), as of torch 2.x.
DEFAULTS: dict[str, dict[str, float]] = {
    "float16": {"rtol": 1e-3, "atol": 1e-5},
    "bfloat16": {"rtol": 1.6e-2, "atol": 1e-5},
    "float32": {"rtol": 1.3e-6, "atol": 1e-5},
    "float64": {"rtol": 1e-7, "atol": 1e-7},
}
DTYPES: tuple[str, ...] = tuple(DEFAULTS)

# The loosest override pv accepts: CAP_FACTOR times torch's default, and never an rtol above
# RTOL_CEILING. A tolerance of 1e300 disarms every comparison that uses it; the loosest honest
# override in this repository is float32 rtol 6e-3 (about 4,600x the default, an analytic bound
# for a rotary kernel), so 10,000x leaves room for measured bounds and none for "anything goes".
# rtol past 0.25 (a quarter of the value itself) compares nothing a kernel could get wrong.
CAP_FACTOR = 1e4
RTOL_CEILING = 0.25
CAPS: dict[str, dict[str, float]] = {
    dtype: {"rtol": min(CAP_FACTOR * d["rtol"], RTOL_CEILING), "atol": CAP_FACTOR * d["atol"]}
    for dtype, d in DEFAULTS.items()
}

Table = dict[str, dict[str, float]]


class ToleranceError(ValueError):
    pass


def _as_mapping(override: Any) -> Mapping[str, Any]:
    if override is None:
        return {}
    if hasattr(override, "model_dump"):  # pv.schema.Tolerance
        return override.model_dump(exclude_none=True)
    if isinstance(override, Mapping):
        return override
    raise ToleranceError(f"tolerance override must be a mapping, not {type(override).__name__}")


def merged(override: Any = None) -> Table:
    """The defaults with a falsifier's override applied dtype by dtype (`source` is dropped)."""
    table = copy.deepcopy(DEFAULTS)
    for key, value in _as_mapping(override).items():
        if key == "source" or value is None:
            continue
        if key not in table:
            raise ToleranceError(f"unknown dtype {key!r} in tolerance; known: {', '.join(DTYPES)}")
        if not isinstance(value, Mapping) or set(value) != {"rtol", "atol"}:
            raise ToleranceError(f"tolerance.{key} must give exactly rtol and atol")
        for name in ("rtol", "atol"):
            number = value[name]
            if (isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number)
                    or number < 0):
                raise ToleranceError(f"tolerance.{key}.{name} must be a finite number >= 0, got {number!r}")
            if number > CAPS[key][name]:
                raise ToleranceError(over_cap(key, name, number))
        table[key] = {"rtol": float(value["rtol"]), "atol": float(value["atol"])}
    return table


def over_cap(dtype: str, name: str, value: float) -> str:
    cap = CAPS[dtype][name]
    return (f"tolerance.{dtype}.{name} = {value:g} is over the {dtype} cap of {cap:g} ({CAP_FACTOR:g}x "
            f"torch.testing's default {DEFAULTS[dtype][name]:g}{', at most ' + format(RTOL_CEILING, 'g') if name == 'rtol' else ''}):"
            " a tolerance that loose disarms the comparison")


def caps_exceeded(override: Any) -> list[tuple[str, str, float]]:
    """(dtype, rtol|atol, value) of every number of a raw override over its dtype's cap."""
    out = []
    for dtype, value in (override.items() if isinstance(override, Mapping) else ()):
        if dtype not in CAPS or not isinstance(value, Mapping):
            continue
        for name in ("rtol", "atol"):
            number = value.get(name)
            if isinstance(number, (int, float)) and not isinstance(number, bool) and number > CAPS[dtype][name]:
                out.append((dtype, name, number))
    return out


def dtype_name(dtype: Any) -> str:
    """'float32' from 'float32', 'torch.float32' or a torch dtype (without importing torch)."""
    text = str(dtype)
    return text.rsplit(".", 1)[-1]


def for_dtype(table: Mapping[str, Mapping[str, float]], dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for a dtype from a merged table."""
    name = dtype_name(dtype)
    if name not in table:
        raise ToleranceError(f"no tolerance for dtype {name!r}; known: {', '.join(sorted(table))}")
    entry = table[name]
    return float(entry["rtol"]), float(entry["atol"])


def wants_tolerance(check: Callable[..., Any]) -> bool:
    """Whether the check declares a parameter named `tolerance` (a **kwargs catch-all does not count)."""
    try:
        parameters = inspect.signature(check).parameters
    except (TypeError, ValueError):
        return False
    param = parameters.get("tolerance")
    return param is not None and param.kind in (
        inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD
    )
