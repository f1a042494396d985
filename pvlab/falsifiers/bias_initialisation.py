"""A recipe's bias initialisation: every bias an independent draw from N(0, bias_init_std).

runtime.pretrain.draw_biases documents "Every bias from N(0, std)", seeded by the recipe's seed;
docs/runtime.md: "`bias_init_std` starts the biases at N(0, std)" (the Qwen2 subjects set it
so that their Q/K/V biases carry signal, as a production Qwen2's do). A draw that reuses one
stream for several tensors (a generator seeded afresh per tensor) still gives non-zero biases
of the right spread, but the layers' biases are copies of one vector.

Oracle, independent of the runtime's generator use: the statistics of independent normal
samples, computed here in float64 from the drawn values alone (never by re-drawing them):

* cosine similarity c of two independent N(0, s^2 I) vectors of length n: y/|y| is uniform on
  the sphere and independent of x, so c is distributed as one coordinate of a uniform unit
  vector, and P(|c| > t) <= 2 exp(-n t^2 / 2) (concentration on the sphere, K. Ball, "An
  elementary introduction to modern convex geometry", lemma 2.2). With t = 6 / sqrt(n):
  <= 2 e^-18 = 3.0e-8 per pair. Tensors of different lengths are compared on their common
  prefix (still independent normal vectors).
* sample second moment m2 = sum(x^2) / n of N(0, s^2): n m2 / s^2 ~ chi-square(n); Laurent and
  Massart (2000, lemma 1): P(X - n >= 2 sqrt(n z) + 2z) <= e^-z and P(n - X >= 2 sqrt(n z))
  <= e^-z. With z = 18 (e^-18 = 1.5e-8): sqrt(m2) / s in [sqrt(max(0, 1 - 2 sqrt(z/n))),
  sqrt(1 + 2 sqrt(z/n) + 2z/n)].
* sample mean of N(0, s^2): mean sqrt(n) / s ~ N(0, 1); P(|Z| > 6) = 2.0e-9.
* the pooled values over s against the standard normal CDF: Dvoretzky-Kiefer-Wolfowitz
  (Massart's constant): P(sup |F_n - Phi| > e) <= 2 exp(-2 n e^2); e = 3 / sqrt(n) gives 2 e^-18.

Summed over every tensor and pair of the two models below (under 250 events), a correct draw
fails any of these with probability below 1e-5, whatever the seed.
"""

from __future__ import annotations

import importlib
import math

import torch

from ._util import torch_device
from .normal_draws import CORRELATION_SIGMAS, ks_to_standard_normal, pairs, spread, std_bounds


def _configs():
    from pvlab.runtime.config import ModelConfig

    common = dict(vocab_size=64, hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=128,
                  max_position_embeddings=32, rope_theta=10000.0, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=0)
    # Qwen2 (Q/K/V biases, GQA): q_proj.bias 512, k_proj/v_proj.bias 256 values, 4 layers
    qwen2 = ModelConfig(model_type="qwen2", intermediate_size=96, num_hidden_layers=4, tie_word_embeddings=True,
                        qkv_bias=True, **common)
    # Llama with attention_bias and mlp_bias: o_proj and the MLP's biases too (128 to 512 values), 2 layers
    llama = ModelConfig(model_type="llama", intermediate_size=256, num_hidden_layers=2, tie_word_embeddings=False,
                        qkv_bias=True, o_proj_bias=True, mlp_bias=True, **common)
    return {"qwen2": qwen2, "llama": llama}


def expected_biases(config) -> list[str]:
    """The bias tensors docs/runtime.md's model table gives a config (HF names)."""
    names = []
    for i in range(config.num_hidden_layers):
        prefix = f"model.layers.{i}"
        if config.qkv_bias:
            names += [f"{prefix}.self_attn.{p}_proj.bias" for p in "qkv"]
        if config.o_proj_bias:
            names.append(f"{prefix}.self_attn.o_proj.bias")
        if config.mlp_bias:
            names += [f"{prefix}.mlp.{p}_proj.bias" for p in ("gate", "up", "down")]
    return sorted(names)


def _drawn(config, std: float, seed: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(state before, state after) runtime.pretrain.draw_biases on a model initialised as
    pretrain initialises one (checkpoint.init_model, weights 'random', the same seed)."""
    checkpoint = importlib.import_module("pvlab.runtime.checkpoint")
    pretrain = importlib.import_module("pvlab.runtime.pretrain")
    model = checkpoint.init_model(config=config, weights="random", seed=seed, device="cpu", path="reference")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    pretrain.draw_biases(model, std, seed)
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    return before, after


def biases_drawn_independently(*, device: str, std: float = 0.5, seed: int = 3) -> dict:
    """draw_biases(model, std, seed) on a 4-layer Qwen2 and a 2-layer Llama with every bias
    (models built by checkpoint.init_model from `seed`, as pretrain builds them), judged from
    the drawn values by the bounds of the module docstring.

    Observations: bias_tensors (bias tensors found, both models), bias_names_wrong (models whose
    bias names differ from docs/runtime.md's table), undrawn (biases with a zero value, i.e.
    left at their zero init), weights_changed (non-bias tensors draw_biases altered),
    equal_pairs (pairs of bias tensors of one model equal on their common prefix),
    correlated_pairs (pairs with |cosine| > 6 / sqrt(n) on their common n values),
    max_abs_correlation, correlation_bound (6 / sqrt of the shortest n compared), std_errors
    (tensors whose sqrt(mean x^2) / std leaves the chi-square bound for their n),
    pooled_std_ratio with pooled_std_low / pooled_std_high (all biases of both models),
    mean_errors (tensors with |mean| sqrt(n) / std > 6), ks_distance and ks_bound (pooled values
    / std against the standard normal), nondeterministic (tensors differing between two draws
    with the same seed), seed_insensitive (bias tensors equal under seed + 1), zero_std_nonzero
    (biases non-zero after a draw with std 0)."""
    torch_device(device)   # CPU only: the draw is documented to happen on the CPU
    biases: dict[str, torch.Tensor] = {}
    out = dict(bias_tensors=0, bias_names_wrong=0, undrawn=0, weights_changed=0, equal_pairs=0,
               correlated_pairs=0, max_abs_correlation=0.0, std_errors=0, mean_errors=0,
               nondeterministic=0, seed_insensitive=0, zero_std_nonzero=0)
    shortest = None
    for family, config in _configs().items():
        before, after = _drawn(config, std, seed)
        names = sorted(n for n in after if n.endswith(".bias"))
        out["bias_names_wrong"] += int(names != expected_biases(config))
        out["bias_tensors"] += len(names)
        out["weights_changed"] += sum(not torch.equal(before[n], after[n]) for n in after if not n.endswith(".bias"))
        values = {n: after[n].to(torch.float64).flatten() for n in names}
        for n in names:
            x = values[n]
            biases[f"{family}:{n}"] = x
            out["undrawn"] += int(bool((x == 0).any()))
            _, std_error, mean_error = spread(x, std)
            out["std_errors"] += int(std_error)
            out["mean_errors"] += int(mean_error)
        equal, correlated, largest, least = pairs(values)
        out["equal_pairs"] += equal
        out["correlated_pairs"] += correlated
        out["max_abs_correlation"] = max(out["max_abs_correlation"], largest)
        shortest = least if shortest is None else min(shortest, least or shortest)
        _, again = _drawn(config, std, seed)
        out["nondeterministic"] += sum(not torch.equal(after[n], again[n]) for n in after)
        _, other = _drawn(config, std, seed + 1)
        out["seed_insensitive"] += sum(torch.equal(after[n], other[n]) for n in names)
        _, zero = _drawn(config, 0.0, seed)
        out["zero_std_nonzero"] += sum(bool((zero[n] != 0).any()) for n in names)
    pooled = torch.cat(list(biases.values())) / std
    n_pooled = pooled.numel()
    lower, upper = std_bounds(n_pooled)
    ks, ks_bound = ks_to_standard_normal(pooled)
    out.update(correlation_bound=CORRELATION_SIGMAS / math.sqrt(shortest or 1),
               pooled_std_ratio=float(pooled.square().mean().sqrt()), pooled_std_low=lower, pooled_std_high=upper,
               ks_distance=ks, ks_bound=ks_bound, pooled_values=n_pooled)
    return out
