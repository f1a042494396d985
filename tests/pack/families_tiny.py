"""Tiny subjects of several model families for the pack's tests, built by transformers itself:
a random checkpoint of each family's own architecture (its own config class, tensor names,
norms, positions, head tying), and a subject directory whose batches a tiny model learns in a
few dozen steps.

The data: each row opens with `RANDOM_PREFIX` random tokens, then counts up by one (mod the
vocabulary) from the last of them. The opening is unpredictable (about ln V per target), the rest
is a bigram a 2-layer model learns in seconds, so early positions score far worse than late ones
(the token-weighting check needs that difference to tell its two averages apart) and a trained
model's held-out loss sits well below ln V.

`trained_subject` trains through the transformers adapter itself (`train_step`, `evaluate`,
`save`), stopping mid-training so a fine-tune still has held-out headroom.
"""

from __future__ import annotations

from pathlib import Path

import torch

from pvpack import subjects
from pvpack.protocol import REFERENCE, Batch, Runtime, TrainSettings

VOCAB, SEQ, ROWS, RANDOM_PREFIX = 128, 16, 4, 4
SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)


def _configs() -> dict:
    import transformers as t

    rope = dict(max_position_embeddings=64)
    return {
        # Qwen2: Q/K/V biases, tied head (the shape every subject had before this file)
        "qwen2": lambda: t.Qwen2Config(vocab_size=VOCAB, num_key_value_heads=2, tie_word_embeddings=True,
                                       **SMALL, **rope),
        # Llama: no biases, untied head; a Llama-3-style list of end-of-sequence ids
        "llama": lambda: t.LlamaConfig(vocab_size=VOCAB, num_key_value_heads=2, eos_token_id=[2, 3],
                                       **SMALL, **rope),
        # Llama with attention_bias=True: Q/K/V (and O) biases under Llama's own names
        "llama-bias": lambda: t.LlamaConfig(vocab_size=VOCAB, num_key_value_heads=2, attention_bias=True,
                                            **SMALL, **rope),
        # Mistral: sliding-window attention, no biases, untied head
        "mistral": lambda: t.MistralConfig(vocab_size=VOCAB, num_key_value_heads=2, sliding_window=8,
                                           **SMALL, **rope),
        # Gemma: embeddings scaled by sqrt(hidden), (1 + w) RMSNorm, GeGLU, tied head, head_dim 16
        "gemma": lambda: t.GemmaConfig(vocab_size=VOCAB, num_key_value_heads=2, head_dim=16, pad_token_id=None,
                                       **SMALL, **rope),
        # Gemma2: embeddings scaled by sqrt(hidden), (1 + w) RMSNorm, logit and attention soft-capping,
        # alternating sliding/global layers, tied head, head_dim not hidden / heads
        "gemma2": lambda: t.Gemma2Config(vocab_size=VOCAB, num_key_value_heads=2, head_dim=16, sliding_window=8,
                                         final_logit_softcapping=30.0, attn_logit_softcapping=50.0,
                                         query_pre_attn_scalar=16, pad_token_id=None, **SMALL, **rope),
        # Phi-3: fused qkv_proj and gate_up_proj, no biases, untied head
        "phi3": lambda: t.Phi3Config(vocab_size=VOCAB, num_key_value_heads=2, pad_token_id=None,
                                     eos_token_id=VOCAB - 1, bos_token_id=1, **SMALL, **rope),
        # GPT-NeoX: fused query_key_value with bias, partial rotary, LayerNorm with bias, parallel
        # residual, untied embed_out
        "gpt_neox": lambda: t.GPTNeoXConfig(vocab_size=VOCAB, rotary_pct=0.5, **SMALL, **rope),
        # GPT-2: learned absolute positions, Conv1D c_attn (fused, biased), tied head
        "gpt2": lambda: t.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                     bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1),
        # OPT: separate q/k/v projections with biases under model.decoder, learned absolute positions
        "opt": lambda: t.OPTConfig(vocab_size=VOCAB, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                                   num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=32,
                                   pad_token_id=None, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1),
    }


# pad_token_id=None where a family's default pad id falls in the tiny vocabulary: transformers
# zeroes that embedding row, and a row starting with it then gives all-zero logits at position 0,
# whose cosine logits_parity counts as 0 (a known false FAIL; see test_families.py).
FAMILIES = ("qwen2", "llama", "llama-bias", "mistral", "gemma", "gemma2", "phi3", "gpt_neox", "gpt2", "opt")


def config(family: str):
    return _configs()[family]()


def checkpoint(family: str, directory: Path, *, seed: int = 0, noisy_biases: bool = True) -> Path:
    """A random checkpoint of `family`; with noisy_biases, its projection biases (where it has any)
    drawn N(0, 0.5) instead of transformers' zeros, so a dropped bias shows."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config(family))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if noisy_biases and name.endswith(".bias") and "norm" not in name and "ln" not in name.split(".")[-2]:
                parameter.normal_(0, 0.5)
    model.save_pretrained(str(directory), safe_serialization=True)
    return directory


def batches(count: int, seed: int, *, rows: int = ROWS) -> list[Batch]:
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        prefix = torch.randint(0, VOCAB, (rows, RANDOM_PREFIX), generator=generator)
        steps = torch.arange(1, SEQ + 2 - RANDOM_PREFIX)
        counting = (prefix[:, -1:] + steps) % VOCAB
        windows = torch.cat([prefix, counting], dim=1)                    # (rows, SEQ + 1)
        out.append(Batch(windows[:, :-1].contiguous(), windows[:, 1:].contiguous()))
    return out


def _write(directory: Path, name: str, ckpt: Path, init: str, recorded: dict) -> Path:
    held = batches(4, 1)
    return subjects.write(directory, name=name, checkpoint=ckpt.relative_to(directory), init=init,
                          recorded=recorded, heldout=held, train=batches(32, 2), train_windows=batches(2, 3),
                          prompts=[b.inputs[0].tolist() for b in batches(6, 4, rows=1)])


def random_subject(family: str, root: Path) -> Path:
    """The family's architecture at the runtime's own initialisation (init=random)."""
    ckpt = checkpoint(family, root / "checkpoint")
    return _write(root, f"{family}-random", ckpt, "random", {})


def trained_subject(family: str, root: Path, *, steps: int = 60, lr: float = 1e-2) -> Path:
    """The family trained `steps` steps through the transformers adapter, saved mid-training."""
    from pvpack.adapters.transformers import TransformersAdapter

    start = checkpoint(family, root / "start", noisy_biases=False)   # training makes them non-zero
    runtime = Runtime(TransformersAdapter(), "transformers")
    model = runtime.load(start, device="cpu", path=REFERENCE, train=TrainSettings(lr=lr, seed=0))
    data = batches(steps, 100, rows=8)
    for batch in data:
        model.train_step(batch)
    ckpt = model.save(root / "checkpoint")
    val_loss = model.evaluate(batches(4, 1))
    model.close()
    return _write(root, f"{family}-trained", ckpt, "trained", {"val_loss": val_loss})


def write_file_subject(family: str, root: Path) -> Path:
    """The family's random checkpoint (noisy biases) as the subject's weights (init=trained: the
    checks load the file), with the subject's batches: no training, for checks that need none."""
    ckpt = checkpoint(family, root / "checkpoint")
    return _write(root, f"{family}-file", ckpt, "trained", {})
