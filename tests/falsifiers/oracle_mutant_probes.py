"""Probes of the planted bugs of mutants/independent.py and mutants/oracles.py (issue #12), for
test_mutants.py: each is a cheap direct call whose result changes while its mutant is active.
Imported by test_mutants.py (which collects every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import torch

from pvlab.runtime import checkpoint, data, trainer
from pvlab.runtime.config import preset
from pvlab.runtime.data import LMBatch
from pvlab.runtime.model import CausalLM, KVCache, init_weights


def tiny_model(seed: int = 0, path: str = "reference") -> CausalLM:
    """The tiny preset, randomly initialised, with non-zero biases and norm weights (so that a
    mutant dropping or ignoring them shows), built directly (no fixtures cache, no parity.place)."""
    torch.manual_seed(seed)
    model = CausalLM(preset("tiny"))
    init_weights(model, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(".bias") or name.endswith("norm.weight"):
                parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
    return model.set_path(path).eval()


def _ids(length: int = 12) -> torch.Tensor:
    return torch.randint(0, 512, (2, length), generator=torch.Generator().manual_seed(3))


def _logits() -> torch.Tensor:
    with torch.no_grad():
        return tiny_model()(_ids())


def _decoded() -> tuple:
    """32 seeded sampled tokens of the zoo's trained tiny checkpoint: a random model at init scale
    repeats one token whatever the context, and greedy tokens of the trained one survive a cache
    that holds every position twice (a small perturbation); sampled ones do not."""
    from pvlab.runtime import zoo

    generate = importlib.import_module("pvlab.runtime.generate").generate
    model = checkpoint.load(zoo.tiny_trained(), parity_gate=False)
    prompt = model.tokenizer.encode("def compute_total(items, limit):\n    total = 0\n").ids
    return tuple(generate(model, prompt, max_new_tokens=32, temperature=1.0, seed=0).new_ids)


def _trained_one_step(**settings) -> trainer.Trainer:
    run = trainer.Trainer(tiny_model(), lr=1e-2, **settings)
    run.train_batch(LMBatch.from_sequences(_ids(13)))
    return run


# ---- mutants/independent.py ------------------------------------------------------------------------

probe_mlp_gate_and_up_swapped = _logits
probe_post_attention_norm_reuses_input_norm = _logits
probe_embeddings_scaled_by_sqrt_hidden = _logits


def probe_saved_weights_rounded_to_bfloat16():
    return str(checkpoint.model_tensors(tiny_model())["model.layers.0.self_attn.q_proj.weight"].dtype)


def probe_loader_transposes_square_matrices():
    state = {name: t.clone() for name, t in checkpoint.model_tensors(tiny_model()).items()}
    loaded = checkpoint.init_model(config=preset("tiny"), weights=state, parity_gate=False)
    return loaded.model.layers[0].self_attn.q_proj.weight.detach().clone()


def probe_config_rms_norm_eps_not_written():
    return "rms_norm_eps" in preset("tiny").to_hf_dict()


def probe_warmup_starts_at_zero():
    return trainer.learning_rate(0, peak=1.0, warmup_steps=4, total_steps=10, min_lr=0.1)


def probe_cosine_floor_ignored():
    return trainer.learning_rate(20, peak=1.0, warmup_steps=0, total_steps=10, min_lr=0.1)


def probe_clip_scale_not_capped():
    gradients = [torch.full((4,), 0.1)]
    trainer.clip_gradients(gradients, 1.0, torch.linalg.vector_norm(gradients[0]))
    return gradients[0]


def probe_resume_restarts_schedule():
    run = _trained_one_step()
    with tempfile.TemporaryDirectory(prefix="pv-probe-") as directory:
        run.save(Path(directory) / "ckpt")
        return trainer.Trainer.resume(Path(directory) / "ckpt").step


def probe_padding_targets_scored():
    return LMBatch.from_sequences([[1, 2, 3, 4], [5, 6]]).targets


def probe_heldout_windows_overlap():
    return data.sequential_batches(torch.arange(20), batch_size=2, seq_len=4)[0].inputs


probe_decode_feeds_full_sequence_with_cache = _decoded
probe_decode_reads_first_position_logits = _decoded


# ---- mutants/oracles.py ------------------------------------------------------------------------------

probe_qkv_bias_added_after_rope = _logits


def probe_tied_head_gradient_detached():
    model = tiny_model().train()
    batch = LMBatch.from_sequences(_ids(13))
    model.loss(batch.inputs, batch.targets).backward()
    return model.model.embed_tokens.weight.grad.clone()


def probe_kv_cache_keeps_only_newest():
    model, ids = tiny_model(), _ids()
    cache = KVCache(model.config.num_hidden_layers)
    with torch.no_grad():
        return torch.cat([model(ids[:, :5], cache), model(ids[:, 5:6], cache), model(ids[:, 6:7], cache)], dim=1)


def probe_lr_schedule_one_step_late():
    run = trainer.Trainer(tiny_model(), lr=1.0, warmup_steps=4)
    run.step = 2
    return run.current_lr()


def probe_embeddings_not_decayed():
    return trainer.decays("model.embed_tokens.weight", torch.nn.Parameter(torch.zeros(3, 4)))


def probe_saved_biases_rounded_to_float16():
    return str(checkpoint.model_tensors(tiny_model())["model.norm.weight"].dtype)


def probe_config_written_with_fixed_norm_eps():
    return preset("tiny").to_hf_dict()["rms_norm_eps"]


def probe_optimizer_moments_swapped_on_save():
    return _trained_one_step()._named_optimizer_state()["model.norm.weight::exp_avg"]


def probe_warmup_never_warms():
    return tuple(trainer.learning_rate(s, peak=1.0, warmup_steps=4, total_steps=10, min_lr=0.1) for s in range(5))
