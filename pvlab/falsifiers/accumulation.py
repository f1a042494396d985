"""Gradient accumulation (Trainer(micro_batch_size=m), Trainer.train_step) equals one big batch.

G micro-batches accumulated into one optimizer step must give the loss and every gradient of one
batch holding all their rows. The batch here is built to expose the public defect (the loss of
each micro-batch averaged over its own tokens, then the micro-batches averaged): sequences of
very different lengths, right-padded, split so that the micro-batches hold different numbers of
target tokens and the last one is short. The expected loss and gradients come from a float64
copy of the model running one forward/backward over the whole batch on the reference path —
no accumulation, no trainer.
"""

from __future__ import annotations

import torch

from . import fixtures
from ._util import compared, generator, rtol_atol, torch_device


def _sequences(vocab: int, count: int, min_len: int, max_len: int, seed: int) -> list[list[int]]:
    """`count` random token sequences whose lengths are spread evenly over [min_len, max_len],
    in a seeded order (so micro-batches get unequal numbers of tokens)."""
    lengths = torch.linspace(min_len, max_len, count).round().long()
    lengths = lengths[torch.randperm(count, generator=generator(seed))]
    tokens = torch.randint(0, vocab, (count, max_len), generator=generator(seed + 1))
    return [tokens[i, :int(n)].tolist() for i, n in enumerate(lengths)]


def _float64_reference(model, batch) -> tuple[float, dict[str, torch.Tensor]]:
    reference = fixtures.fresh_copy(model).to("cpu", torch.float64).set_path("reference").train()
    reference.zero_grad(set_to_none=True)
    loss = reference.loss(batch.inputs, batch.targets)
    loss.backward()
    return float(loss.detach()), {n: p.grad.detach() for n, p in reference.named_parameters() if p.grad is not None}


def accumulation_matches_full_batch(*, device: str, path: str | None = None, micro_batch_size: int = 3,
                                    sequences: int = 7, min_len: int = 3, max_len: int = 40, seed: int = 0,
                                    tolerance: dict | None = None) -> dict:
    """Trainer(micro_batch_size=m).train_batch(batch) — the runtime splits the batch, runs one
    forward/backward per micro-batch and steps once — against float64 autograd over the whole
    batch. Clipping is off so .grad holds the accumulated gradient itself.

    Observations: loss, reference_loss, loss_abs_diff, loss_tol (atol + rtol * |reference|);
    grad_max_abs_diff, grad_max_abs_ref, grad_allclose_ratio, grad_nonfinite (all gradients
    concatenated); rtol, atol (float32 on the reference path, bfloat16 on the fast path);
    micro_batches, last_micro_batch_rows, min_micro_tokens, max_micro_tokens (the design: unequal
    token counts and a short last micro-batch are what the defect needs to show)."""
    from pvlab.runtime import data, devices, trainer

    dev = torch_device(device)
    path = path or devices.default_path(dev)
    rtol, atol = rtol_atol(tolerance, "bfloat16" if path == "fast" else "float32")
    model = fixtures.fresh_copy(fixtures.random_model("tiny", seed=seed, device=str(dev), path=path))
    batch = data.LMBatch.from_sequences(_sequences(model.config.vocab_size, sequences, min_len, max_len, seed))
    reference_loss, reference_grads = _float64_reference(model, batch)

    run = trainer.Trainer(model, lr=1e-3, weight_decay=0.0, grad_clip=0.0, seed=seed,
                          micro_batch_size=micro_batch_size)
    loss = run.train_batch(batch)
    names = sorted(reference_grads)
    grads = dict(model.named_parameters())
    missing = [n for n in names if grads[n].grad is None]
    if missing:
        raise RuntimeError(f"no accumulated gradient for {missing[0]} (and {len(missing) - 1} more)")
    actual = torch.cat([grads[n].grad.detach().to("cpu", torch.float64).flatten() for n in names])
    expected = torch.cat([reference_grads[n].flatten() for n in names])
    micro = batch.split(micro_batch_size)
    tokens = [m.num_target_tokens for m in micro]
    obs = compared(actual, expected, rtol=rtol, atol=atol, prefix="grad_")
    obs.pop("grad_rtol"), obs.pop("grad_atol")
    obs.update(loss=loss, reference_loss=reference_loss, loss_abs_diff=abs(loss - reference_loss),
               loss_tol=atol + rtol * abs(reference_loss), rtol=rtol, atol=atol, micro_batches=len(micro),
               last_micro_batch_rows=int(micro[-1].inputs.shape[0]), min_micro_tokens=min(tokens),
               max_micro_tokens=max(tokens))
    return obs
