"""The rows of a batch are independent: each row's logits are what the model gives that row fed
alone, and feeding the rows in another order reorders the logits and changes nothing else.

The bug class mixes the batch dimension with another one: a reshape that interleaves rows with
heads or positions (`view(B, H, T, D)` of a tensor laid out `(B, T, H, D)`), position ids counted
over the flattened batch, a normalisation or a cache whose statistic spans rows, a buffer sized
for one row. A batch of one row cannot show any of them, and a batch of one is the scale most
tests and most decoding loops run at.

The oracle is the runtime itself on one row at a time: independent of every code path that
handles more than one row, judged in float64 by the property, not by a second implementation.

Assumes: a causal LM whose `logits` of a (B, T) batch give each row's logits from that row's
tokens alone (rows of one length, no padding, no packing across rows). Numbers may differ
between a batch of one and of four in the last bits (a kernel picks its tiling by the shape);
the tolerance, relative to the largest logit, absorbs that and nothing of the size of a mixed
row.
"""

from __future__ import annotations

import torch

from ..protocol import LOAD, LOGITS
from ._base import load, subject_of, uses
from ._controls import path_dtype, tolerance_of
from .evaluation import default_path

# (rtol, atol) on the largest logit. bfloat16: parity's cross-backend bound, which a same-backend
# change of batch size stays inside.
_TOLERANCE = {"float32": (1e-5, 1e-6), "bfloat16": (1.6e-2, 1e-5)}


def rotated(rows: int) -> torch.Tensor:
    """An order in which every row moves (row i goes to i + 1), so a runtime that reads another
    row's slot, or keeps row 0's result for the batch, gives some row the wrong logits."""
    return torch.roll(torch.arange(rows), 1)


@uses(LOAD, LOGITS)
def rows_are_independent(*, runtime, device: str, subject: str, path: str | None = None, rows: int = 4,
                         tolerance: dict | None = None) -> dict:
    """`rows` distinct held-out rows fed three ways on `device`/`path`: as one batch, as the same
    batch in a rotated order, and one row at a time.

    Observations: alone_max_abs_diff (largest |batched - alone| over rows, positions and the
    vocabulary), reordered_max_abs_diff (largest |reordered, put back - batched|), rows_differing
    (rows whose logits in the batch differ from theirs alone by more than tol), max_abs_ref
    (largest logit, alone), tol (atol + rtol * max_abs_ref), rows, distinct_rows (rows whose
    tokens differ from every other row's: two equal rows would hide a swap), length, rtol, atol."""
    if rows < 2:
        raise ValueError(f"rows={rows}: independence of rows needs a batch of at least 2")
    who = subject_of(subject)
    path = default_path(runtime, device, path)
    rtol, atol = tolerance_of(tolerance, path_dtype(path), _TOLERANCE)
    inputs = torch.cat([batch.inputs for batch in who.heldout(max(1, -(-rows // 2)))])[:rows]
    if int(inputs.shape[0]) < rows:
        raise RuntimeError(f"subject {who.name}: {int(inputs.shape[0])} held-out rows, {rows} asked")
    order = rotated(rows)
    model = load(runtime, who, device, path)
    try:
        batched = model.logits(inputs).to("cpu", torch.float64)
        reordered = model.logits(inputs[order]).to("cpu", torch.float64)
        alone = torch.cat([model.logits(inputs[r:r + 1]).to("cpu", torch.float64) for r in range(rows)])
    finally:
        model.close()
    put_back = torch.empty_like(reordered)
    put_back[order] = reordered
    max_ref = float(alone.abs().max())
    tol = atol + rtol * max_ref
    per_row = (batched - alone).abs().flatten(1).amax(dim=1)
    return {"alone_max_abs_diff": float(per_row.max()), "reordered_max_abs_diff": float((put_back - batched).abs().max()),
            "rows_differing": int((per_row > tol).sum()), "max_abs_ref": max_ref, "tol": tol, "rows": rows,
            "distinct_rows": int(torch.unique(inputs, dim=0).shape[0]), "length": int(inputs.shape[1]),
            "rtol": rtol, "atol": atol}
