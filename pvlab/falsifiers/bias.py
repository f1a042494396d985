"""Q/K/V projection biases of Qwen2-family models: are they on the device after upload, with the
checkpoint's values, and does the forward on the device path actually add them?
"""

from __future__ import annotations

import torch

from . import fixtures
from ._util import randn, torch_device

PROJECTIONS = ("q_proj", "k_proj", "v_proj")


def qkv_bias_presence(*, device: str, checkpoint: str = "tiny-trained", path: str = "fast") -> dict:
    """Observations: qkv_bias_expected (q/k/v bias tensors in the checkpoint file),
    qkv_bias_on_device (of those, how many the placed model holds as a parameter on `device`
    with exactly the file's values), qkv_bias_nonzero (file biases that are not all zero — a
    check on the fixture: all-zero biases could not show that they are dropped)."""
    from safetensors import safe_open

    dev = torch_device(device)
    directory = fixtures.checkpoint_dir(checkpoint)
    model = fixtures.model(checkpoint, device, path)
    parameters = dict(model.named_parameters())
    expected = on_device = nonzero = 0
    with safe_open(str(directory / "model.safetensors"), framework="pt", device="cpu") as handle:
        for name in handle.keys():
            if not any(name.endswith(f"self_attn.{p}.bias") for p in PROJECTIONS):
                continue
            expected += 1
            stored = handle.get_tensor(name)
            nonzero += int(bool(stored.abs().max() > 0))
            held = parameters.get(name)
            if held is None or held.device.type != dev.type or held.shape != stored.shape:
                continue
            if torch.equal(held.detach().to("cpu", stored.dtype), stored):
                on_device += 1
    return {"qkv_bias_expected": expected, "qkv_bias_on_device": on_device, "qkv_bias_nonzero": nonzero}


def qkv_bias_effect(*, device: str, checkpoint: str = "tiny-trained", path: str = "fast", layer: int = 0,
                    seq: int = 9, seed: int = 0) -> dict:
    """For each of q, k and v in turn: zero that projection's weight, give its bias two different
    non-zero values, run the layer's attention (on `device`, `path`, under the path's autocast)
    on the same hidden states, and measure how much the output moves. With a zero weight the
    projection's output *is* its bias, so a forward that skips the bias add sees no change.

    A projection that holds no bias parameter although the config has qkv_bias=True has effect 0.

    Observations: bias_effect_max_abs (the smallest of the three per-projection effects: every
    bias must matter), q_bias_effect, k_bias_effect, v_bias_effect, output_max_abs."""
    from pvlab.runtime import kernels

    dev = torch_device(device)
    base = fixtures.model(checkpoint, device, path)
    config = base.config
    hidden = randn((2, seq, config.hidden_size), seed=seed, device=dev)
    positions = kernels.positions_for(0, seq, dev)
    cos, sin = kernels.rope_cos_sin(config.rope_theta, config.attention_head_dim, positions)
    effects = {}
    largest = 0.0
    for i, name in enumerate(PROJECTIONS):
        attention = fixtures.fresh_copy(base.model.layers[layer].self_attn)
        projection = getattr(attention, name)
        if not config.qkv_bias:
            raise RuntimeError(f"{checkpoint} has no Q/K/V biases (qkv_bias=False); their effect cannot be measured")
        if projection.bias is None:
            # The config promises a bias the placed model does not hold: nothing can be added.
            effects[name] = 0.0
            continue
        outputs = []
        with torch.no_grad():
            projection.weight.zero_()
            for variant in (0, 1):
                projection.bias.copy_(randn(tuple(projection.bias.shape), seed=seed + 10 * i + variant, device=dev))
                with kernels.autocast_for(path, dev.type):
                    outputs.append(attention(hidden, cos, sin).float())
        effects[name] = float((outputs[0] - outputs[1]).abs().max())
        largest = max(largest, float(outputs[0].abs().max()))
    return {
        "bias_effect_max_abs": min(effects.values()),
        "q_bias_effect": effects["q_proj"],
        "k_bias_effect": effects["k_proj"],
        "v_bias_effect": effects["v_proj"],
        "output_max_abs": largest,
    }
