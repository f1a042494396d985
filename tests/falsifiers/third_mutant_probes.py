"""Probes of the third blind batch of planted bugs (in mutants/kernels.py, model.py, trainer.py,
data.py and checkpoint.py, each under "third blind batch"; docs/independent-mutants.md), for
test_mutants.py: each is a cheap direct call whose result changes while its mutant is active.
Imported by test_mutants.py (which collects every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib
from pathlib import Path

import torch

from pvlab.runtime import checkpoint, corpus, kernels, trainer
from pvlab.runtime import model as models
from pvlab.runtime.config import preset
from pvlab.runtime.data import LMBatch
from pvlab.runtime.model import CausalLM


def _tiny(seed: int = 0, **changes) -> CausalLM:
    model = CausalLM(preset("tiny").replace(**changes))
    models.init_weights(model, seed)
    return model.eval()


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ---- the fast path ---------------------------------------------------------------------------------

def probe_fused_projection_weights_stacked_without_grad():
    x = _randn(2, 3, 8, seed=1).requires_grad_()
    weights = [_randn(8, 8, seed=2).requires_grad_(), _randn(4, 8, seed=3).requires_grad_()]
    biases = [_randn(8, seed=4).requires_grad_(), None]
    first, second = kernels.fused_linear_fast(x, weights, biases)
    (first.sum() + second.sum()).backward()
    return tuple(w.grad is None for w in weights) + (biases[0].grad is None,)


def probe_swiglu_fast_uses_tanh_gelu():
    return kernels.swiglu_fast(_randn(2, 5, seed=5), _randn(2, 5, seed=6))


def probe_sdpa_boolean_mask_cast_to_float():
    q, k, v = _randn(1, 2, 4, 8, seed=7), _randn(1, 2, 4, 8, seed=8), _randn(1, 2, 4, 8, seed=9)
    document_ids = torch.tensor([[0, 0, 1, 1]])
    return kernels.attention_fast(q, k, v, kernels.document_causal_mask(document_ids))


# ---- positions of padded rows ----------------------------------------------------------------------

def probe_padded_decode_positions_from_first_columns():
    attention_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    positions, _ = models.attention_layout(torch.zeros(2, 1, dtype=torch.long), attention_mask=attention_mask)
    return positions


# ---- the fused loss --------------------------------------------------------------------------------

def probe_fused_loss_gradient_normalised_per_chunk():
    generator = torch.Generator().manual_seed(10)
    hidden = torch.randn(2, 6, 8, generator=generator).requires_grad_()
    weight = torch.randn(30, 8, generator=generator)
    targets = torch.randint(0, 30, (2, 6), generator=generator)
    targets[1, 3:] = kernels.IGNORE_INDEX
    loss = kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=4, compute_dtype=torch.float32)
    loss.backward()
    return hidden.grad


# ---- the trainer -----------------------------------------------------------------------------------

def probe_nonfinite_loss_step_still_applied():
    run = trainer.Trainer(_tiny(), lr=1e-3)
    applied = run._read_step(torch.tensor(float("nan")), torch.tensor(1.0), torch.tensor(5))
    return applied, run.nonfinite_losses


# ---- batches ---------------------------------------------------------------------------------------

def probe_micro_batch_split_drops_last_column():
    batch = LMBatch.from_sequences([[1, 2, 3, 4, 5, 6], [7, 8, 9], [10, 11, 12, 13], [14, 15]])
    return tuple(tuple(part.targets.shape) for part in batch.split(2))


def probe_batch_to_device_drops_document_ids():
    batch = LMBatch.from_packed_rows([[[1, 2, 3], [4, 5, 6, 7]]])
    return batch.to("cpu").document_ids


# ---- checkpoint I/O --------------------------------------------------------------------------------

def probe_tied_checkpoint_conflicting_head_accepted():
    state = {name: t.detach().clone() for name, t in checkpoint.model_tensors(_tiny(seed=2)).items()}
    state["lm_head.weight"] = _randn(*state["model.embed_tokens.weight"].shape, seed=11)
    try:
        checkpoint.init_model(config=preset("tiny"), weights=state, parity_gate=False)
        return "accepted"
    except Exception as error:  # noqa: BLE001 - which refusal it is, is the probe
        return type(error).__name__


# ---- generation ------------------------------------------------------------------------------------

def probe_sampling_temperature_multiplies_logits():
    logits = torch.linspace(0.0, 3.0, 16).expand(64, 16)
    return kernels.sample_pick(logits, 0.3, torch.Generator().manual_seed(12))


def probe_batched_prompts_right_padded():
    generate_batch = importlib.import_module("pvlab.runtime.generate").generate_batch
    results = generate_batch(_tiny(), [[5, 9, 17, 33, 65, 129], [7, 11]], max_new_tokens=3)
    return tuple(tuple(result.new_ids) for result in results)


# ---- the corpus ------------------------------------------------------------------------------------

def probe_corpus_digest_ignores_paths():
    texts = [f"x = {i}\n" for i in range(3)]
    named = corpus.Corpus("probe", Path("."), tuple(corpus.SourceFile(f"a{i}.py", t) for i, t in enumerate(texts)))
    renamed = corpus.Corpus("probe", Path("."), tuple(corpus.SourceFile(f"b/{i}.py", t) for i, t in enumerate(texts)))
    return named.digest == renamed.digest
