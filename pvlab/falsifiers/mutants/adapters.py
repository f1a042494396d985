"""Planted bugs at the seams of the falsifier pack's transformers adapter
(pvpack.adapters.transformers): the seeds' defects written against a third-party stack, so the
same pack falsifiers that kill them in pvlab's runtime are shown to kill them there too.

Each swaps one attribute of the adapter module or its model class (the adapter calls them at
call time: `token_loss`, `schedule`, `TransformersModel.evaluate`, `TransformersAdapter.load`)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap


@mutant("hf_fast_path_drops_qkv_bias")
def hf_fast_path_drops_qkv_bias():
    """The transformers adapter's fast path loads the model without its Q/K/V projection biases
    (each q/k/v_proj.bias removed from the modules); the reference path keeps them.

    Imitates the seed defect (a CUDA forward dropping Qwen's Q/K/V biases) on transformers.
    Seam: pvpack.adapters.transformers.TransformersAdapter.load (fast path only)."""
    from pvpack.adapters import transformers as adapter
    from pvpack.protocol import FAST

    original = adapter.TransformersAdapter.load

    def load(self, checkpoint, *, device, path="reference", **kwargs):
        model = original(self, checkpoint, device=device, path=path, **kwargs)
        if path == FAST:
            for name, module in model.model.named_modules():
                if name.endswith(("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")):
                    module.bias = None
        return model

    with plant("hf_fast_path_drops_qkv_bias", swap(adapter.TransformersAdapter, "load", load)):
        yield


@mutant("hf_evaluate_averages_batch_means")
def hf_evaluate_averages_batch_means():
    """The transformers adapter's eval loop averages each batch's mean loss: a batch with few
    scored tokens weighs as much as a full one.

    Imitates `sum(losses) / len(losses)` for a token-weighted mean (the pvlab seam's
    evaluate_averages_batch_means). Seam: pvpack.adapters.transformers.TransformersModel.evaluate."""
    import torch

    from pvpack.adapters import transformers as adapter

    def evaluate(self, batches):
        self.model.eval()
        with torch.no_grad():
            losses = [float(adapter.token_loss(self._forward(b.inputs), b.targets.to(self.device))) for b in batches]
        return sum(losses) / len(losses)

    with plant("hf_evaluate_averages_batch_means", swap(adapter.TransformersModel, "evaluate", evaluate)):
        yield


@mutant("hf_warmup_never_warms")
def hf_warmup_never_warms():
    """The warmup is written with integer division, lr * (step // warmup_steps): every warmup
    step runs at lr 0, then the schedule jumps to the peak.

    Imitates a warmup that never warms. Seam: pvpack.adapters.transformers.schedule."""
    from pvpack.adapters import transformers as adapter

    original = adapter.schedule

    def schedule(step, settings):
        if settings.warmup_steps and step < settings.warmup_steps:
            return settings.lr * (step // settings.warmup_steps)
        return original(step, settings)

    with plant("hf_warmup_never_warms", swap(adapter, "schedule", schedule)):
        yield


@mutant("hf_fast_path_attention_scale_wrong")
def hf_fast_path_attention_scale_wrong():
    """The transformers adapter's fast path scales attention scores by 1/head_dim instead of
    1/sqrt(head_dim) (each attention module's `scaling` set on fast-path models): flatter
    attention than the reference path's.

    Imitates a fast path that diverges from the reference (a fused attention kernel given the
    wrong `scale=`). Seam: pvpack.adapters.transformers.TransformersAdapter.load (fast path only)."""
    from pvpack.adapters import transformers as adapter
    from pvpack.protocol import FAST

    original = adapter.TransformersAdapter.load

    def load(self, checkpoint, *, device, path="reference", **kwargs):
        model = original(self, checkpoint, device=device, path=path, **kwargs)
        if path == FAST:
            for module in model.model.modules():
                if hasattr(module, "scaling") and hasattr(module, "head_dim"):
                    module.scaling = 1.0 / module.head_dim
        return model

    with plant("hf_fast_path_attention_scale_wrong", swap(adapter.TransformersAdapter, "load", load)):
        yield
