"""Master-weight training (pvlab.runtime.master_weights, contract master-weights): the fused AdamW
update against a float64 textbook AdamW, training against the fast-path Trainer, the checkpoint,
and the non-finite step.

MasterWeightTrainer holds the decoder matrices in bf16 with an fp32 master each and updates
master, moments and bf16 copy in one kernel with the gradient clip folded in
(pvlab.runtime.adamw_update). Every defect of such an update is silent: a stale bf16 copy, a clip
factor dropped, a skipped step applied, a bias correction one step off, a checkpoint holding the
bf16 rounding instead of the masters; the loss still falls in each case. The oracles:

* the update: AdamW written here from its textbook definition (Loshchilov & Hutter's decoupled
  decay, Kingma & Ba's bias corrections, eps outside the square root) in float64, applied to
  the runtime's own state before each step (so each step's error is that step's rounding alone,
  never an accumulation), with an elementwise bound derived from fp32 rounding (`_bounds`);
* training: the fast-path Trainer (torch's fused AdamW on fp32 parameters under autocast), the
  recipe master weights claim to reproduce;
* the checkpoint: the masters read from the optimizer, the file read with safetensors, and the
  uninterrupted run;
* a non-finite step: the state copied by the check before it, and a run that never saw it.

Runtime calls go through module attributes at call time (adamw_update.update_reference, ...), so a
planted bug in either reaches the checks.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from pathlib import Path

import torch

from ._util import torch_device

U32 = 2.0 ** -24            # fp32 unit roundoff
TINY = 2.0 ** -126          # smallest normal fp32: a flushed denormal (Triton's ftz) errs by less
ROUNDINGS = 16              # unit roundoffs per bound term (counted in _bounds' docstring: at most 8)
BETAS, EPS = (0.9, 0.95), 1e-8


# ---- shared ---------------------------------------------------------------------------------------

def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as integers (bit-for-bit comparison, NaN equal to NaN of the same bits)."""
    t = tensor.detach().to("cpu").contiguous()
    return t.view({torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float64: torch.int64}[t.dtype])


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _master_pairs(optimizer):
    """(bf16 parameter, its fp32 master view) for every master-weight parameter of a MasterAdamW."""
    return [(p, m) for s in optimizer.sets if s.has_master for p, m in zip(s.parameters, s.master_views(optimizer.masters))]


def _copy_mismatches(optimizer) -> int:
    """Master-weight parameters whose bf16 weight is not bf16(master) bit for bit (round to nearest even)."""
    return sum(int(not _same_bits(p.detach(), m.detach().to(torch.bfloat16))) for p, m in _master_pairs(optimizer))


def _state(optimizer) -> dict[str, torch.Tensor]:
    """Copies of a MasterAdamW's masters, moments and step count, on the CPU."""
    out = {"step": optimizer.step_count.detach().to("cpu").clone()}
    if optimizer.masters is not None:
        out["masters"] = optimizer.masters.detach().to("cpu").clone()
    for index, state_set in enumerate(optimizer.sets):
        out[f"exp_avg{index}"] = state_set.exp_avg.detach().to("cpu").clone()
        out[f"exp_avg_sq{index}"] = state_set.exp_avg_sq.detach().to("cpu").clone()
    return out


@contextlib.contextmanager
def _counting_updates(counts: dict):
    """Count the calls of adamw_update's two implementations (whichever functions the module holds
    now, planted bugs included): which one ran is an observation."""
    from pvlab.runtime import adamw_update

    originals = {name: getattr(adamw_update, name) for name in ("update_reference", "update_triton")}

    def counted(name):
        def call(*args, **kwargs):
            counts[name] = counts.get(name, 0) + 1
            return originals[name](*args, **kwargs)
        return call

    try:
        for name in originals:
            setattr(adamw_update, name, counted(name))
        yield counts
    finally:
        for name, original in originals.items():
            setattr(adamw_update, name, original)


# ---- 001: the update against a float64 textbook AdamW --------------------------------------------

# (name, shape, held as a master weight): decay follows trainer.decays (matrices only); sizes
# 1536 and 640 are multiples of 16, 91, 37 and 45 are not.
TENSORS = (("a.weight", (48, 32), True), ("b.weight", (7, 13), True), ("c.norm", (45,), True),
           ("d.weight", (16, 40), False), ("e.bias", (37,), False))


def textbook_adamw(p, m, v, g, *, lr, wd, step, betas=BETAS, eps=EPS):
    """One AdamW step in float64 (Loshchilov & Hutter, Algorithm 2, with Kingma & Ba's bias
    corrections): p <- p - lr*wd*p - lr * m_hat / (sqrt(v_hat) + eps), m_hat = m / (1 - b1^t),
    v_hat = v / (1 - b2^t). Returns (p, m, v, adam_term, denominator)."""
    b1, b2 = betas
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1 ** step), v / (1 - b2 ** step)
    denominator = v_hat.sqrt() + eps
    adam = lr * m_hat / denominator
    return p - lr * wd * p - adam, m, v, adam, denominator


def _bounds(p, m, v_new, g, adam, denominator, *, lr, wd, step, betas=BETAS):
    """Elementwise bounds on |fp32 runtime - float64 textbook| for one step from the same state.

    The runtime rounds each of its operations to fp32 (relative error u = 2^-24 each, ~2 u for
    Triton's approximate sqrt and division): the constants b1, 1 - b1 (one rounding each), the
    gradient times the clip factor (the factor itself carries the fp32 rounding of the norm, of
    norm + 1e-6 and of the division: 3 u), two products and a sum: at most 8 u of each term of
    m, and of v (the square adds one), whose terms are all non-negative, so 8 u of v itself. The
    weight: the decay term (3 roundings), then lr / bc1 and sqrt(bc2) (float64, rounded once to
    fp32), sqrt, the division by sqrt(bc2), + eps, the quotient and the product: 8 u of the Adam
    term, plus its m's absolute error carried through the quotient, plus 2 u of the value for the
    two subtractions. ROUNDINGS = 16 doubles every count; TINY admits a flushed denormal."""
    b1, b2 = betas
    k = ROUNDINGS * U32
    step_size = lr / (1 - b1 ** step)
    m_error = k * (b1 * m.abs() + (1 - b1) * g.abs()) + TINY
    v_error = k * v_new + TINY
    correction2 = math.sqrt(1 - b2 ** step)
    p_error = k * (p.abs() * (1 + lr * wd) + 2 * adam.abs()) + step_size * m_error / denominator / correction2 + TINY
    # the denominator's own error (relative, at most v's half plus three roundings) is inside 2 * adam's k
    return p_error, m_error, v_error


def update_matches_textbook(*, device: str, steps: int = 4, seed: int = 0, lr: float = 1e-2,
                            weight_decay: float = 0.1, clip_fraction: float = 0.5) -> dict:
    """MasterAdamW over five parameters (TENSORS: three held as bf16 with fp32 masters, two as
    fp32; decayed and undecayed in each; sizes multiple of 16 and not), `steps` steps of seeded
    gradients (bf16 for the master weights) with a learning rate that changes at every step and
    max_norm = clip_fraction * the gradients' norm (a clip factor < 1 at every step). Before each
    step the check copies the runtime's masters, moments and fp32 parameters; the float64
    textbook AdamW applied to that copy with the same gradients and the clip factor computed here
    (min(1, max_norm / (norm + 1e-6)), the norm in float64) is the oracle of the step.

    Observations: steps, tensors, bf16_tensors, unaligned_tensors (sizes not a multiple of 16),
    aligned_tensors, clipped_steps (clip factor < 1), max_error_ratio (the largest |runtime -
    textbook| / bound over every element of every master, fp32 parameter and moment after every
    step; NaN counts as infinite), max_value_error_ratio, max_moment_error_ratio, max_value_abs_error,
    bf16_copy_mismatches (steps x tensors whose bf16 weight is not bf16(master) bit for bit),
    moved_bf16_weights (bf16 weights the steps changed: a copy never refreshed would pass the
    copy test vacuously otherwise), triton_updates, reference_updates (calls of each
    implementation), triton_importable, expected_path_ran (cpu: only the reference ran; cuda: only
    the Triton kernel ran)."""
    from pvlab.runtime import kernels, master_weights

    dev = torch_device(device)
    draw = torch.Generator().manual_seed(seed)
    named = [(name, torch.nn.Parameter((torch.randn(shape, generator=draw, dtype=torch.float64) * 0.5).float().to(dev)))
             for name, shape, _ in TENSORS]
    masters = {name for name, _, held in TENSORS if held}
    optimizer = master_weights.MasterAdamW(named, masters, lr=lr, weight_decay=weight_decay, betas=BETAS, eps=EPS)
    from pvlab.runtime import trainer

    decay = {name: (weight_decay if trainer.decays(name, p) else 0.0) for name, p in named}
    master_of = {id(p): m for p, m in _master_pairs(optimizer)}
    views = {id(p): (mv, vv) for s in optimizer.sets for p, mv, vv in zip(s.parameters, s.exp_avg_views,
                                                                          s.exp_avg_sq_views)}
    start_bf16 = {name: p.detach().clone() for name, p in named if name in masters}
    worst = {"value": 0.0, "moment": 0.0}
    abs_error, copy_mismatches, clipped = 0.0, 0, 0
    counts: dict = {}
    for step in range(1, int(steps) + 1):
        rate = lr * (0.5 + 0.5 * step / steps)           # changes at every step
        grads = {name: (torch.randn(p.shape, generator=draw, dtype=torch.float64) * (0.1 * step)).to(p.dtype)
                 for name, p in named}
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))
        max_norm = clip_fraction * norm
        clip = min(1.0, max_norm / (norm + 1e-6))
        clipped += int(clip < 1.0)
        before = {}
        for name, p in named:
            value = master_of.get(id(p), p)
            m, v = views[id(p)]
            before[name] = tuple(t.detach().to("cpu", torch.float64).clone() for t in (value, m, v))
            p.grad = grads[name].to(dev)
        with _counting_updates(counts):
            optimizer.step(lr=rate, total_norm=torch.tensor(norm, dtype=torch.float32, device=dev),
                           max_norm=max_norm, skip=torch.zeros((), dtype=torch.bool, device=dev))
        for name, p in named:
            p0, m0, v0 = before[name]
            g = grads[name].double() * clip
            p1, m1, v1, adam, denominator = textbook_adamw(p0, m0, v0, g, lr=rate, wd=decay[name], step=step)
            p_bound, m_bound, v_bound = _bounds(p0, m0, v1, g, adam, denominator, lr=rate, wd=decay[name], step=step)
            value = master_of.get(id(p), p).detach().to("cpu", torch.float64)
            m, v = (t.detach().to("cpu", torch.float64) for t in views[id(p)])
            for kind, actual, expected, bound in (("value", value, p1, p_bound), ("moment", m, m1, m_bound),
                                                  ("moment", v, v1, v_bound)):
                ratio = ((actual - expected).abs() / bound).nan_to_num(nan=math.inf).max().item()
                worst[kind] = max(worst[kind], ratio)
            abs_error = max(abs_error, (value - p1).abs().nan_to_num(nan=math.inf).max().item())
        copy_mismatches += _copy_mismatches(optimizer)
        optimizer.zero_grad()
    moved = sum(int(not torch.equal(start_bf16[name], p.detach())) for name, p in named if name in masters)
    triton_updates, reference_updates = counts.get("update_triton", 0), counts.get("update_reference", 0)
    if dev.type == "cuda":
        expected = int(triton_updates == steps * len(optimizer.sets) and reference_updates == 0)
    else:
        expected = int(reference_updates == steps * len(optimizer.sets) and triton_updates == 0)
    return {"steps": int(steps), "tensors": len(TENSORS), "bf16_tensors": len(masters),
            "unaligned_tensors": sum(int(math.prod(s) % 16 != 0) for _, s, _ in TENSORS),
            "aligned_tensors": sum(int(math.prod(s) % 16 == 0) for _, s, _ in TENSORS),
            "clipped_steps": clipped, "max_error_ratio": max(worst.values()),
            "max_value_error_ratio": worst["value"], "max_moment_error_ratio": worst["moment"],
            "max_value_abs_error": abs_error, "bf16_copy_mismatches": copy_mismatches, "moved_bf16_weights": moved,
            "triton_updates": triton_updates, "reference_updates": reference_updates,
            "triton_importable": int(dev.type == "cuda" and kernels._triton_available()),
            "expected_path_ran": expected}


# ---- 002: training tracks the fast-path Trainer --------------------------------------------------

def _tiny_model(dev, seed: int, layers: int):
    from pvlab.runtime import checkpoint
    from pvlab.runtime.config import preset

    return checkpoint.init_model(config=preset("tiny").replace(num_hidden_layers=int(layers)), weights="random",
                                 seed=seed, device=str(dev), path="fast", parity_gate=False)


def _batches(seed: int, count: int, rows: int = 4, length: int = 17) -> list:
    from pvlab.runtime.config import preset
    from pvlab.runtime.data import LMBatch

    draw = torch.Generator().manual_seed(1000 + seed)
    return [LMBatch.from_sequences(torch.randint(0, preset("tiny").vocab_size, (rows, length), generator=draw))
            for _ in range(count)]


def _first_gradients_differ(dev, seed: int, layers: int, batch) -> tuple[int, int]:
    """One eager forward/backward of the same batch on two fresh copies of the model, one owned
    by a Trainer (fp32 weights under autocast), one by a MasterWeightTrainer (bf16 weights):
    (parameters whose gradient differs bit for bit, once the bf16 ones are widened; parameters)."""
    from pvlab.runtime import trainer
    from pvlab.runtime.master_weights import MasterWeightTrainer

    runs = [trainer.Trainer(_tiny_model(dev, seed, layers)), MasterWeightTrainer(_tiny_model(dev, seed, layers))]
    gradients = []
    for run in runs:
        run.model.train()
        b = batch.to(dev)
        trainer._batch_loss(run.model, b, b.targets).backward()
        gradients.append({n: p.grad.detach().float() for n, p in run.model.named_parameters()})
    differing = sum(int(not _same_bits(gradients[0][n], gradients[1][n])) for n in gradients[0])
    return differing, len(gradients[0])


def training_tracks_fast_path(*, device: str, steps: int = 8, seed: int = 0, layers: int = 2, lr: float = 1e-2,
                              grad_clip: float = 2.0, capture_after: int = 3, loss_rtol: float = 2e-3,
                              grad_norm_rtol: float = 2e-2) -> dict:
    """The tiny preset (random init, `seed`, `layers` decoder layers, fast path) trained `steps`
    steps on the same seeded 4 x 16-token batches, warm-up 2 then cosine to lr / 10 at `steps`,
    grad_clip `grad_clip`: by the fast-path Trainer (the oracle: torch's fused AdamW on fp32
    parameters under autocast) and by MasterWeightTrainer. On cuda both are the graphed,
    compiled trainers (step_graph.GraphedTrainer and GraphedMasterTrainer, compile="model",
    capture_after plain steps then replays).

    Observations: steps, first_grad_mismatches (parameters whose first gradient differs bit for
    bit between the two, eager), parameters, loss_max_rel_diff (over every step), loss_rtol,
    grad_norm_max_rel_diff, grad_norm_rtol, clipped_steps, unclipped_steps (by the oracle's
    norm), bf16_copy_mismatches (at the end), param_max_abs_diff (masters vs the oracle's
    parameters at the end: information, Adam amplifies ulp differences), loss_drop (the oracle's
    first loss minus its last: the run trains), replayed_steps (cuda: min of the two trainers'
    replays; cpu: 0), graphed (1 on cuda)."""
    from pvlab.runtime import master_weights, step_graph, trainer

    dev = torch_device(device)
    batches = [_batches(seed, 2)[i % 2] for i in range(int(steps))]   # two batches in turn: the loss falls
    differing, parameters = _first_gradients_differ(dev, seed, layers, batches[0])
    options = dict(lr=lr, weight_decay=0.1, grad_clip=grad_clip, seed=seed, warmup_steps=2, total_steps=int(steps),
                   min_lr=lr / 10)
    if dev.type == "cuda":
        oracle = step_graph.GraphedTrainer(_tiny_model(dev, seed, layers), compile="model",
                                           capture_after=capture_after, **options)
        subject = master_weights.GraphedMasterTrainer(_tiny_model(dev, seed, layers), compile="model",
                                                      capture_after=capture_after, **options)
    else:
        oracle = trainer.Trainer(_tiny_model(dev, seed, layers), **options)
        subject = master_weights.MasterWeightTrainer(_tiny_model(dev, seed, layers), **options)
    losses, norms = ([], []), ([], [])
    for batch in batches:
        for index, run in enumerate((oracle, subject)):
            losses[index].append(run.train_batch(batch))
            norms[index].append(run.last_grad_norm)
    loss_diff = max(abs(a - b) / abs(a) if math.isfinite(b) else math.inf for a, b in zip(*losses))
    norm_diff = max(abs(a - b) / abs(a) if math.isfinite(b) else math.inf for a, b in zip(*norms))
    clipped = sum(int(n > grad_clip) for n in norms[0])
    with subject.masters_in_model():
        final = {n: p.detach().to("cpu", torch.float64) for n, p in subject.model.named_parameters()}
    param_diff = max((final[n] - p.detach().to("cpu", torch.float64)).abs().max().item()
                     for n, p in oracle.model.named_parameters())
    replayed = min(oracle.replayed_steps, subject.replayed_steps) if dev.type == "cuda" else 0
    return {"steps": int(steps), "first_grad_mismatches": differing, "parameters": parameters,
            "loss_max_rel_diff": loss_diff, "loss_rtol": loss_rtol, "grad_norm_max_rel_diff": norm_diff,
            "grad_norm_rtol": grad_norm_rtol, "clipped_steps": clipped, "unclipped_steps": len(norms[0]) - clipped,
            "bf16_copy_mismatches": _copy_mismatches(subject.optimizer), "param_max_abs_diff": param_diff,
            "loss_drop": losses[0][0] - losses[0][-1], "replayed_steps": replayed, "graphed": int(dev.type == "cuda")}


# ---- 003: the checkpoint ---------------------------------------------------------------------------

def _master_trainer(seed: int, layers: int, cls=None):
    from pvlab.runtime import master_weights

    cls = cls or master_weights.MasterWeightTrainer
    return cls(_tiny_model(torch.device("cpu"), seed, layers), lr=1e-2, weight_decay=0.1, grad_clip=1.0, seed=seed,
               warmup_steps=2, total_steps=8, min_lr=1e-3)


def _named_moments(optimizer, model) -> dict[str, torch.Tensor]:
    """exp_avg / exp_avg_sq / step per parameter name of a torch optimizer or a MasterAdamW."""
    out = {}
    for name, p in model.named_parameters():
        for key, value in optimizer.state.get(p, {}).items():
            out[f"{name}::{key}"] = torch.as_tensor(value).detach().to("cpu", torch.float32).clone()
    return out


def checkpoint_holds_masters(*, device: str, seed: int = 0, layers: int = 2, save_at: int = 3, steps: int = 7) -> dict:
    """A MasterWeightTrainer (tiny preset, warm-up 2 then cosine to step 8) trained `save_at`
    steps and saved; the saved model.safetensors read with safetensors; Trainer.resume and
    MasterWeightTrainer.resume of the directory; the latter trained on to `steps` beside the
    uninterrupted run. And a plain Trainer trained `save_at` steps, saved, resumed by
    MasterWeightTrainer.

    Observations: master_tensors (master-weight parameters), saved_not_masters (of them, tensors
    in the file that are not the fp32 master bit for bit), saved_bf16_representable (tensors in
    the file every value of which is a bf16 number: the bf16 rounding written instead),
    saved_other_mismatches (fp32 parameters whose file tensor is not the parameter),
    trainer_resume_loads, trainer_resume_weight_mismatches (Trainer.resume's weights vs the file),
    master_resume_loads, resumed_master_mismatches (MasterWeightTrainer.resume's masters and fp32
    parameters vs the file), continued_steps, loss_mismatches, state_mismatches (masters, moments,
    step count, fp32 parameters and bf16 weights of the resumed run vs the uninterrupted one at
    the end), step_mismatches (trainer.step after the resume and at the end), cross_moment_mismatches
    (a plain Trainer's checkpoint resumed by MasterWeightTrainer: moments and step count per
    parameter vs the plain trainer's), cross_weight_mismatches (its masters and fp32 parameters vs
    the plain trainer's parameters)."""
    from safetensors import safe_open

    from pvlab.runtime import master_weights, trainer

    torch_device(device)   # CPU only: the bit-for-bit promises are the CPU's
    batches = _batches(seed, int(steps))
    obs = dict.fromkeys(("saved_not_masters", "saved_bf16_representable", "saved_other_mismatches",
                         "trainer_resume_loads", "trainer_resume_weight_mismatches", "master_resume_loads",
                         "resumed_master_mismatches", "loss_mismatches", "state_mismatches", "step_mismatches",
                         "cross_moment_mismatches", "cross_weight_mismatches"), 0)
    straight = _master_trainer(seed, layers)
    straight_losses = [straight.train_batch(b) for b in batches]
    run = _master_trainer(seed, layers)
    for batch in batches[:save_at]:
        run.train_batch(batch)
    masters = {id(p): m for p, m in _master_pairs(run.optimizer)}
    obs["master_tensors"] = len(masters)
    with tempfile.TemporaryDirectory(prefix="pv-master-weights-") as tmp:
        directory = Path(tmp) / "saved"
        run.save(directory)
        with safe_open(str(directory / "model.safetensors"), framework="pt") as file:
            saved = {name: file.get_tensor(name) for name in file.keys()}
        for name, p in run.model.named_parameters():
            if name not in saved:
                continue   # the tied head: not written
            if id(p) in masters:
                obs["saved_not_masters"] += int(not _same_bits(saved[name], masters[id(p)].detach()))
                obs["saved_bf16_representable"] += int(torch.equal(saved[name].to(torch.bfloat16).float(), saved[name]))
            else:
                obs["saved_other_mismatches"] += int(not _same_bits(saved[name], p.detach()))
        plain = trainer.Trainer.resume(directory, path="fast")
        obs["trainer_resume_loads"] = 1
        obs["trainer_resume_weight_mismatches"] = sum(int(not _same_bits(saved[n], p.detach()))
                                                      for n, p in plain.model.named_parameters() if n in saved)
        resumed = master_weights.MasterWeightTrainer.resume(directory, path="fast")
        obs["master_resume_loads"] = int(isinstance(resumed.optimizer, master_weights.MasterAdamW))
    with resumed.masters_in_model():
        obs["resumed_master_mismatches"] = sum(int(not _same_bits(saved[n], p.detach()))
                                               for n, p in resumed.model.named_parameters() if n in saved)
    obs["step_mismatches"] += int(resumed.step != save_at)
    for s in range(save_at, int(steps)):
        obs["loss_mismatches"] += int(resumed.train_batch(batches[s]) != straight_losses[s])
    obs["continued_steps"] = int(steps) - save_at
    obs["step_mismatches"] += int(resumed.step != steps)
    a, b = _state(straight.optimizer), _state(resumed.optimizer)
    obs["state_mismatches"] = sum(int(key not in b or not _same_bits(a[key], b[key])) for key in a)
    obs["state_mismatches"] += sum(int(not _same_bits(p.detach(), q.detach())) for p, q in
                                   zip(straight.model.parameters(), resumed.model.parameters()))
    # a plain Trainer's checkpoint, resumed with master weights
    source = _master_trainer(seed, layers, cls=trainer.Trainer)
    for batch in batches[:save_at]:
        source.train_batch(batch)
    with tempfile.TemporaryDirectory(prefix="pv-master-weights-") as tmp:
        source.save(Path(tmp) / "plain")
        crossed = master_weights.MasterWeightTrainer.resume(Path(tmp) / "plain", path="fast")
    expected, got = _named_moments(source.optimizer, source.model), _named_moments(crossed.optimizer, crossed.model)
    obs["cross_moment_mismatches"] = sum(int(k not in got or not _same_bits(v, got[k])) for k, v in expected.items())
    obs["cross_moments"] = len(expected)
    with crossed.masters_in_model():
        crossed_values = {n: p.detach().clone() for n, p in crossed.model.named_parameters()}
    obs["cross_weight_mismatches"] = sum(int(not _same_bits(p.detach(), crossed_values[n]))
                                         for n, p in source.model.named_parameters())
    return obs


# ---- 004: a non-finite step changes nothing --------------------------------------------------------

def nonfinite_step_changes_nothing(*, device: str, seed: int = 0, layers: int = 2, healthy_steps: int = 2,
                                   poisoned_token: int = 7) -> dict:
    """A MasterWeightTrainer (tiny preset, warm-up 2 then cosine) trains `healthy_steps` steps;
    then one embedding row the next batch reads is set to NaN (the embedding is fp32, not a
    master weight: the loss is NaN, every gradient NaN), one step is taken, the row is written
    back as it was, and one more finite step is taken. A second trainer takes the same steps
    without the poisoned one.

    Observations: poisoned_loss_finite, changed (masters, moments, step count, fp32 parameters
    (the NaN row equal to itself), bf16 weights, trainer.step: those the poisoned step changed),
    nonfinite_counted, next_loss_equal (the next finite step's loss equals the clean run's bit
    for bit), next_state_mismatches (after it: state, parameters and step vs the clean run's),
    healthy_moved (master weights the healthy steps moved; all must move), master_tensors."""
    from pvlab.runtime.data import LMBatch

    torch_device(device)   # CPU only: the skip is one device tensor, the same code on every device
    batches = _batches(seed, healthy_steps + 1)
    rows = [list(range(3 + i, 14 + i)) for i in range(2)]
    rows[0][4] = rows[1][2] = poisoned_token
    poisoned = LMBatch.from_sequences(rows)
    run, clean = _master_trainer(seed, layers), _master_trainer(seed, layers)
    start = {n: p.detach().clone() for n, p in run.model.named_parameters()}
    for batch in batches[:healthy_steps]:
        run.train_batch(batch)
        clean.train_batch(batch)
    masters = {id(p) for p, _ in _master_pairs(run.optimizer)}
    moved = sum(int(not torch.equal(start[n], p.detach())) for n, p in run.model.named_parameters() if id(p) in masters)
    embedding = dict(run.model.named_parameters())["model.embed_tokens.weight"]
    row = embedding.detach()[poisoned_token].clone()
    with torch.no_grad():
        embedding[poisoned_token] = float("nan")
    before_state = _state(run.optimizer)
    before_params = {n: p.detach().clone() for n, p in run.model.named_parameters()}
    step_before, counted_before = run.step, run.nonfinite_losses
    loss = run.train_batch(poisoned)
    after_state = _state(run.optimizer)
    changed = sum(int(not _same_bits(before_state[k], after_state[k])) for k in before_state)
    changed += sum(int(not _same_bits(before_params[n], p.detach())) for n, p in run.model.named_parameters())
    changed += int(run.step != step_before)
    with torch.no_grad():
        embedding[poisoned_token] = row
    next_loss, clean_loss = run.train_batch(batches[healthy_steps]), clean.train_batch(batches[healthy_steps])
    a, b = _state(clean.optimizer), _state(run.optimizer)
    mismatches = sum(int(not _same_bits(a[k], b[k])) for k in a)
    mismatches += sum(int(not _same_bits(p.detach(), q.detach())) for p, q in
                      zip(clean.model.parameters(), run.model.parameters()))
    mismatches += int(run.step != clean.step)
    return {"poisoned_loss_finite": int(loss is not None and math.isfinite(loss)), "changed": changed,
            "nonfinite_counted": run.nonfinite_losses - counted_before,
            "next_loss_equal": int(next_loss == clean_loss), "next_state_mismatches": mismatches,
            "healthy_moved": moved, "master_tensors": len(masters)}
