"""Probes of the planted bugs of pvlab/falsifiers/mutants/equivalence.py, collected by
test_mutants.py (PROBES): each a cheap direct call whose result changes while the bug is planted."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from pvlab.runtime import checkpoint, kernels, trainer
from pvlab.runtime.config import preset
from pvlab.runtime.model import CausalLM, init_weights


def probe_accumulation_averages_micro_batch_means():
    return torch.tensor([trainer.micro_batch_weight(10, 40, 2), trainer.micro_batch_weight(30, 40, 2)])


_DOCUMENTS = torch.tensor([[0, 0, 0, 1, 1, 2], [0, 0, 0, 0, -1, -1]])


def probe_packing_attends_across_documents():
    return kernels.document_causal_mask(_DOCUMENTS)


def probe_packing_positions_do_not_restart():
    return kernels.document_positions(_DOCUMENTS)


def probe_positions_ignore_attention_mask():
    return kernels.positions_from_attention_mask(torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]))


def _reloaded_head_is_embedding(tied: bool) -> torch.Tensor:
    model = CausalLM(preset("tiny").replace(tie_word_embeddings=tied))
    init_weights(model, 0)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint.save_checkpoint(model, Path(tmp) / "ckpt")
        loaded = checkpoint.load(Path(tmp) / "ckpt")
    return torch.tensor(int(loaded.lm_head.weight is loaded.model.embed_tokens.weight))


def probe_tied_head_untied_on_load():
    return _reloaded_head_is_embedding(True)


def probe_untied_head_tied_on_load():
    return _reloaded_head_is_embedding(False)


def probe_compiled_layer_branch_scaled():
    # What the compiled call wraps, not a run of it: running inductor for the first time in a
    # process sets environment variables, which the restoration test would blame on the mutant.
    module = torch.nn.Identity()
    trainer.compile_module(module)
    wrapped = getattr(module._compiled_call_impl, "_torchdynamo_orig_callable", module._compiled_call_impl)
    return getattr(wrapped, "__name__", repr(wrapped))


def probe_fused_attention_backward_transposed():
    q, k, v = (torch.randn(1, 4, 4, 8, generator=torch.Generator().manual_seed(i)).requires_grad_() for i in range(3))
    with kernels.sdpa_backend("flash"):
        kernels.attention_fast(q, k, v).sum().backward()
    return torch.cat([q.grad.flatten(), k.grad.flatten(), v.grad.flatten()])
