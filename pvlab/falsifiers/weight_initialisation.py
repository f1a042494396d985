"""Random initialisation as documented: every matrix an independent N(0, initializer_range) draw,
every norm weight 1, every bias 0.

runtime.model.init_weights documents "Random initialisation as transformers does it
(normal(0, initializer_range) matrices, zero biases, unit norms), drawn on the CPU from `seed`";
docs/runtime.md's API table names it. A model built with `init_model(weights="random")` is what
every from-scratch pretraining run starts from, so a wrong scale (a fan-in 1/sqrt(d) carried over
from another codebase, the std applied twice, a preset's range ignored) trains a different model
from the first step while everything still runs.

Oracle, independent of the runtime's generator use: the statistics of independent normal samples
computed here in float64 from the drawn values alone, with the bounds of
pvlab.falsifiers.normal_draws (Laurent-Massart for the second moment, the normal tail for
the mean, concentration on the sphere for the cosine of two independent vectors, DKW for the
pooled values against the standard normal CDF), each event failing a correct draw with
probability at most 2 exp(-18); summed over every tensor and pair of the models below (under
600 events), below 2e-5 whatever the seed. The documented value of the std is the config's
`initializer_range`, set here to values no preset uses (0.05, 0.013), so a draw that ignores it
shows; which tensor is a matrix, a norm or a bias is read from its name (HF names,
docs/runtime.md's model table).
"""

from __future__ import annotations

import importlib

import torch

from ._util import torch_device
from .normal_draws import ks_to_standard_normal, pairs, spread


def _configs():
    from pvlab.runtime.config import ModelConfig

    common = dict(vocab_size=96, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=32, rope_theta=10000.0, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=0)
    qwen2 = ModelConfig(model_type="qwen2", intermediate_size=128, num_hidden_layers=2, tie_word_embeddings=True,
                        qkv_bias=True, initializer_range=0.05, **common)
    llama = ModelConfig(model_type="llama", intermediate_size=96, num_hidden_layers=2, tie_word_embeddings=False,
                        qkv_bias=False, initializer_range=0.013, **common)
    return {"qwen2": qwen2, "llama": llama}


def _init(config, seed: int) -> dict[str, torch.Tensor]:
    checkpoint = importlib.import_module("pvlab.runtime.checkpoint")
    model = checkpoint.init_model(config=config, weights="random", seed=seed, device="cpu", path="reference",
                                  parity_gate=False)
    return {n: p.detach().to(torch.float64).clone() for n, p in model.named_parameters()}


def random_init_as_documented(*, device: str, seed: int = 5) -> dict:
    """init_model(weights="random", seed) of a 2-layer Qwen2 (tied head, Q/K/V biases,
    initializer_range 0.05) and a 2-layer Llama (untied head, initializer_range 0.013), judged from
    the drawn values.

    Observations: matrices (tensors judged as matrices), norms_not_one (norm weights with a value
    other than 1), biases_not_zero (biases with a non-zero value), std_errors (matrices whose
    sqrt(mean x^2) / initializer_range leaves the chi-square bound for their size), worst_std_ratio
    (the ratio furthest from 1), mean_errors (|mean| sqrt(n) / std > 6), equal_pairs (two matrices
    equal on their common prefix), correlated_pairs (|cosine| > 6 / sqrt(n)), ks_distance /
    ks_bound (the pooled matrices' values / std against the standard normal), nondeterministic
    (tensors differing between two inits with the same seed), seed_insensitive (matrices equal
    under seed + 1)."""
    torch_device(device)   # CPU only: init draws on the CPU whatever the model's device (documented)
    out = dict(matrices=0, norms_not_one=0, biases_not_zero=0, std_errors=0, worst_std_ratio=1.0, mean_errors=0,
               equal_pairs=0, correlated_pairs=0, nondeterministic=0, seed_insensitive=0)
    pooled = []
    for config in _configs().values():
        std = config.initializer_range
        drawn = _init(config, seed)
        matrices = sorted(n for n in drawn if not n.endswith(("norm.weight", ".bias")))
        out["norms_not_one"] += sum(bool((drawn[n] != 1).any()) for n in drawn if n.endswith("norm.weight"))
        out["biases_not_zero"] += sum(bool((drawn[n] != 0).any()) for n in drawn if n.endswith(".bias"))
        out["matrices"] += len(matrices)
        values = {n: drawn[n].flatten() for n in matrices}
        for n in matrices:
            ratio, std_error, mean_error = spread(values[n], std)
            out["std_errors"] += int(std_error)
            out["mean_errors"] += int(mean_error)
            if abs(ratio - 1) > abs(out["worst_std_ratio"] - 1):
                out["worst_std_ratio"] = ratio
            pooled.append(values[n] / std)
        equal, correlated, _, _ = pairs(values)
        out["equal_pairs"] += equal
        out["correlated_pairs"] += correlated
        again = _init(config, seed)
        out["nondeterministic"] += sum(not torch.equal(drawn[n], again[n]) for n in drawn)
        other = _init(config, seed + 1)
        out["seed_insensitive"] += sum(torch.equal(drawn[n], other[n]) for n in matrices)
    values = torch.cat(pooled)
    ks, ks_bound = ks_to_standard_normal(values)
    out.update(ks_distance=ks, ks_bound=ks_bound, pooled_values=values.numel())
    return out
