"""pv's system under test: a torch training runtime for the Qwen2 / Llama decoder family.

    model = runtime.load("ckpt/")                       # any HF Qwen2/Llama safetensors directory
    model = runtime.init_model(config="tiny", weights="random", seed=0)
    trainer = runtime.Trainer(model, lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95), grad_clip=1.0,
                              seed=0, path="reference", device="cpu")
    loss = trainer.train_batch(runtime.LMBatch.from_sequences([[1, 2, 3, 4]]))
    path = runtime.zoo.tiny_trained()                   # cached trained checkpoint directory

See docs/runtime.md. This package never imports pv (the tool that tests it).
"""

from . import data, errors, kernels, zoo
from .checkpoint import PopulateReport, init_model, inspect_checkpoint, load, save_checkpoint
from .config import PRESETS, ModelConfig, preset
from .data import LMBatch
from .devices import resolve_device
from .generate import Generation, generate, generate_batch, generate_text, generate_texts
from .model import CausalLM, KVCache
from .parity import ParityReport
from .pretrain import Recipe, pretrain
from .trainer import Trainer

__all__ = [
    "data", "errors", "kernels", "zoo",
    "PopulateReport", "init_model", "inspect_checkpoint", "load", "save_checkpoint",
    "PRESETS", "ModelConfig", "preset", "LMBatch", "resolve_device",
    "Generation", "generate", "generate_batch", "generate_text", "generate_texts", "CausalLM", "KVCache", "ParityReport",
    "Recipe", "pretrain", "Trainer",
]
