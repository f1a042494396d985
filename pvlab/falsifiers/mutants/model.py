"""Planted bugs of runtime.model: CausalLM's forward and loss, the final norm.

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

import weakref

from pv.mutation import mutant

from .planting import plant, swap


@mutant("final_norm_skipped")
def final_norm_skipped():
    """The RMSNorm between the last decoder layer and the output head is skipped: the head sees
    the raw residual stream.

    Imitates the seed defect "final norm skipped". Seam: runtime.model.apply_final_norm."""
    from pvlab.runtime import model

    def apply_final_norm(norm, hidden):
        return hidden

    with plant("final_norm_skipped", swap(model, "apply_final_norm", apply_final_norm)):
        yield


@mutant("eval_reads_stale_train_buffer")
def eval_reads_stale_train_buffer():
    """Eval reads a loss workspace that the last training step wrote instead of its own forward:
    after any training step, an eval-mode loss is the cross-entropy of training's leftover
    (one-hot) logit buffer against training's leftover targets — nearly zero, whatever the
    model and the eval batch. Before the first training step eval is correct.

    Imitates the bug hunt's eval path that reported val_loss 0.0008 (perplexity 1.0008) next to
    train_loss 1.20 at the same model state. Seam: runtime.model.CausalLM.loss (train mode with
    gradients = training; anything else = eval, which Trainer.eval_batch / evaluate use)."""
    import torch

    from pvlab.runtime import kernels
    from pvlab.runtime.model import CausalLM

    original = CausalLM.loss
    workspace: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def loss(self, input_ids, targets):
        if self.training and torch.is_grad_enabled():
            workspace[self] = targets.detach().clone()
            return original(self, input_ids, targets)
        stale = workspace.get(self)
        if stale is None:
            return original(self, input_ids, targets)
        buffer = torch.nn.functional.one_hot(stale.clamp(min=0), self.config.vocab_size).float() * 16.0
        return kernels.cross_entropy_reference(buffer, stale).to(targets.device)

    with plant("eval_reads_stale_train_buffer", swap(CausalLM, "loss", loss)):
        yield


@mutant("head_padded_rows_unmasked")
def head_padded_rows_unmasked():
    """The output head is padded for kernel efficiency (V rounded up to a multiple of 128, plus
    128 when V already is one) and the padding rows — never trained, holding leftover values —
    are not cut off: the model returns V + P logits and the argmax lands in the padding.

    Imitates "the head has the wrong output width" (vocabulary padding leaking into the logits).
    Seam: runtime.model.CausalLM.forward (the logits; the training loss is untouched)."""
    import torch

    from pvlab.runtime import kernels
    from pvlab.runtime.model import CausalLM

    padding: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def rows(model):
        if model not in padding:
            vocab, hidden = model.config.vocab_size, model.config.hidden_size
            extra = 128 - vocab % 128 if vocab % 128 else 128
            generator = torch.Generator(device="cpu").manual_seed(128)
            padding[model] = torch.randn((extra, hidden), generator=generator)
        return padding[model].to(model.device)

    def forward(self, input_ids, cache=None):
        with kernels.autocast_for(self.path, self.device.type):
            hidden = self.model(input_ids, cache)
            logits = self.lm_head(hidden)
            padded = torch.matmul(hidden, rows(self).to(hidden.dtype).t())
            logits = torch.cat((logits, padded.to(logits.dtype)), dim=-1)
        return logits.float()

    with plant("head_padded_rows_unmasked", swap(CausalLM, "forward", forward)):
        yield

