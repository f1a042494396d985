"""Probes of the planted bugs of pvlab/falsifiers/mutants/performance.py, collected by
test_mutants.py (PROBES): each a cheap direct call whose result changes while the bug is planted.
These bugs change no number, so the probes look at what the runtime does, not what it computes."""

from __future__ import annotations

import torch

from pvlab import runtime
from pvlab.falsifiers.host_sync import HostReads
from pvlab.runtime.config import preset
from pvlab.runtime.model import CausalLM, init_weights


def _tiny() -> CausalLM:
    model = CausalLM(preset("tiny").replace(num_hidden_layers=2))
    init_weights(model, 0)
    return model.eval()


def probe_decode_recomputes_the_prefix():
    model, fed = _tiny(), []
    hook = model.model.register_forward_pre_hook(lambda module, args: fed.append(int(args[0].shape[-1])))
    try:
        runtime.generate(model, [1, 2, 3, 4], max_new_tokens=4)
    finally:
        hook.remove()
    return tuple(fed)   # (4, 1, 1, 1) with the cache


def probe_host_read_per_layer():
    model = _tiny()
    with torch.no_grad(), HostReads() as seen:
        model(torch.tensor([[1, 2, 3]]))
    return len(seen.reads)


def probe_fast_path_runs_reference_kernels():
    model = _tiny().set_path("fast")
    return model.path, model.model.layers[0].self_attn.path


def probe_loss_chunk_steps_eager():
    from pvlab.runtime import kernels

    return kernels.COMPILE_LOSS_CHUNKS   # False while the fused loss's chunk steps are left eager


def probe_generate_decodes_eagerly():
    """What runtime.generate asks of its decoder choice: use_graph None (take the CUDA-graph
    decoder where it applies) normally, False under the bug."""
    import importlib

    generation = importlib.import_module("pvlab.runtime.generate")
    original, asked = generation.takes_graph, []

    def spy(device, **settings):
        asked.append(settings["use_graph"])
        return original(device, **settings)

    generation.takes_graph = spy
    try:
        runtime.generate(_tiny(), [1, 2, 3], max_new_tokens=2)
    finally:
        generation.takes_graph = original
    return tuple(asked)
