"""The gradient a training step applies is the derivative of the loss: for each weight tensor,
the step's gradient along a direction equals the central finite difference of the runtime's own
loss along it, computed from two checkpoints with that tensor moved a little either way.

The bug class is every backward that disagrees with its forward: a fused or custom kernel whose
backward is wrong (a transposed attention backward, a chunked loss whose gradient counts padding
or is normalised per chunk), a gradient scaled twice (a loss scale or an accumulation factor not
undone), a weight cut out of the graph (a tied head detached, fused weights stacked without
grad), a gradient that reaches the wrong tensor. A loss-based check cannot see most of these:
training still lowers the loss, only more slowly.

The oracle is the loss itself on the reference path in fp32 on the CPU, differenced in float64:
it shares no backward code with the step under test (and on a fast path, no forward kernel
either). Each direction is the step's own gradient for the tensor plus a random direction, both
normalised: a gradient that points the wrong way, has the wrong length, or is missing (zero)
all move the difference away from the reported slope.

Assumes: the checkpoint's weights in `model*.safetensors` under the names `gradients` uses (Hugging
Face names, or the runtime's own where its load() reads its own: they are moved by name),
`gradients` are what the step applied with clipping off, `loss` is the mean next-token loss the
step differentiates (the step's reported loss must match it within 1 %, else an ERROR), and the
step draws no random numbers (two steps under different seeds must give one loss, else an ERROR
naming dropout: under GPT-2's dropout 0.1 the loss moved 0.15 % and the gradients 14 %).
"""

from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path

import torch

from ..protocol import GRADIENTS, LOAD, LOSS, REFERENCE, TRAIN_STEP, Batch, TrainSettings
from ._base import hf_weight_files, load, subject_of, uses
from ._batches import ragged
from ._controls import seeded, stepped


def _directions(gradients: dict[str, torch.Tensor], names: list[str], seed: int) -> dict[str, torch.Tensor]:
    """Per tensor, a unit direction: its gradient's direction plus a random one (the random
    one alone where the gradient is zero or missing)."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name in names:
        grad = gradients[name]
        random = torch.randn(grad.shape, generator=generator, dtype=torch.float64)
        direction = random / random.norm()
        if float(grad.norm()) > 0:
            direction = direction + grad / grad.norm()
        out[name] = direction / direction.norm()
    return out


def _moved(source: Path, tensors: dict[str, torch.Tensor], name: str, delta: torch.Tensor, into: Path) -> Path:
    """A copy of checkpoint `source` with tensor `name` moved by `delta` (its other files kept,
    the weights in one model.safetensors)."""
    from safetensors.torch import save_file

    into.mkdir()
    for item in source.iterdir():
        if item.is_file() and not item.name.startswith(("model", "optimizer")):
            shutil.copy2(item, into / item.name)
    moved = dict(tensors)
    moved[name] = (tensors[name].to(torch.float64) + delta).to(tensors[name].dtype)
    save_file({k: v.contiguous() for k, v in moved.items()}, str(into / "model.safetensors"), metadata={"format": "pt"})
    return into


@uses(LOAD, TRAIN_STEP, GRADIENTS, LOSS)
def gradient_matches_finite_differences(*, runtime, device: str, subject: str, path: str = REFERENCE, rows: int = 4,
                                        step: float = 1e-2, seed: int = 0, max_tensors: int = 64,
                                        min_len: int = 0, max_len: int = 0) -> dict:
    """The gradient of one step on `device`/`path` (clipping off) against central differences
    of the reference path's loss on the CPU, tensor by tensor, on the first `rows` rows of a
    training batch; with max_len > 0, rows of min_len..max_len scored targets and the rest
    padding (-100, _batches.ragged): a backward that scores padding the forward masks shows.

    Observations: tensors_checked, worst_rel_err (largest |slope - difference| over
    max(|slope|, 1e-2 * the largest |difference|)), median_rel_err, worst_abs_err,
    missing_gradients (checkpoint tensors the step gave no gradient), step_loss_rel_diff
    (|the step's reported loss - loss at the same weights| / loss), largest_difference, step
    (the distance each tensor is moved, along a unit direction)."""
    from safetensors.torch import load_file

    who = subject_of(subject)
    files = hf_weight_files(who, "gradients:gradient_matches_finite_differences")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        tensors.update(load_file(str(file)))
    full = who.train(1)[0]
    batch = ragged(full, rows, min_len, max_len, seed) if max_len > 0 else Batch(full.inputs[:rows], full.targets[:rows])

    def one_step(rng_seed: int) -> tuple[float, dict[str, torch.Tensor]]:
        return stepped(load(runtime, who, device, path, train=TrainSettings(lr=1e-3, grad_clip=0.0, seed=seed)),
                       batch, rng_seed=rng_seed)

    step_loss, gradients = one_step(seed)
    redrawn, _ = one_step(seed + 1)
    drawn = abs(redrawn - step_loss) / max(abs(step_loss), 1e-12)
    if drawn > 1e-6:  # dropout moved a family's loss 0.15 % and its gradients 14 %: judged, a false FAIL
        raise RuntimeError(f"two steps from one state under different random seeds differ by {drawn:.3g} of the loss: "
                           "the step draws random numbers (dropout), so its gradient is not the derivative of one "
                           "function differenced here; turn dropout off in the subject's config")

    def loss_of(checkpoint: Path) -> float:
        scorer = runtime.load(checkpoint, device="cpu", path=REFERENCE)
        try:
            with seeded(seed):
                return float(scorer.loss(batch))
        finally:
            scorer.close()

    base_loss = loss_of(who.checkpoint)
    step_loss_rel_diff = abs(step_loss - base_loss) / max(abs(base_loss), 1e-12)
    if step_loss_rel_diff > 1e-2:  # bf16 on a fast path: 1.5e-4 measured
        raise RuntimeError(f"the step's loss {step_loss:.6g} and loss() at the same weights {base_loss:.6g} differ by "
                           f"{step_loss_rel_diff:.3g} of it: the step is not the function differenced here (another "
                           "loss, another batch); no gradient can be judged against it")
    floating = sorted(n for n, t in tensors.items() if t.is_floating_point())
    missing = [n for n in floating if n not in gradients]
    names = [n for n in floating if n in gradients and gradients[n].shape == tensors[n].shape][:max_tensors]
    directions = _directions(gradients, names, seed)
    slopes, differences = [], []
    with tempfile.TemporaryDirectory(prefix="pv-gradients-") as scratch:
        for i, name in enumerate(names):
            delta = step * directions[name]
            up = loss_of(_moved(who.checkpoint, tensors, name, delta, Path(scratch) / f"{i}-up"))
            down = loss_of(_moved(who.checkpoint, tensors, name, -delta, Path(scratch) / f"{i}-down"))
            differences.append((up - down) / (2 * step))
            slopes.append(float((gradients[name] * directions[name]).sum()))
    largest = max((abs(d) for d in differences), default=0.0)
    floor = 1e-2 * largest
    errors = [abs(s - d) / max(abs(s), floor, 1e-12) for s, d in zip(slopes, differences)]
    ordered = sorted(errors)
    return {"tensors_checked": len(names), "worst_rel_err": max(errors, default=math.inf),
            "median_rel_err": ordered[len(ordered) // 2] if ordered else math.inf,
            "worst_abs_err": max((abs(s - d) for s, d in zip(slopes, differences)), default=math.inf),
            "missing_gradients": len(missing), "step_loss_rel_diff": step_loss_rel_diff,
            "largest_difference": largest, "step": step}
