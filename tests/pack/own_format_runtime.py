"""A small trainer in its own format, the second outside runtime the pack is tested against
(examples/nanotrainer is the first): a Llama-style byte model whose checkpoint is one
`torch.save` file with its own key names (no safetensors, no Hugging Face names; config.json
carries only vocab_size, for the pack), whose loss takes windows of ids and shifts inside with
no masking, and which has one execution path and no decode loop. It was written by following
docs/adopting.md from outside the repository; the adapter below is the one that walkthrough
wrote, condensed. Its adapter seams are the ones nanotrainer's does not exercise: a checkpoint
the pack cannot read itself (which it saves and reloads, state() and gradients() under its own
names), and a batch (masked targets) the runtime cannot take, refused per call with
CapabilityMissing."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from pvpack import subjects
from pvpack.protocol import (EVALUATE, LOSS, RANDOM, REFERENCE, TRAIN_STEP, Batch, CapabilityMissing, RuntimeAdapter,
                             RuntimeModel, TrainSettings)

FILENAME = "bytelm.pt"
HPARAMS = {"n_vocab": 256, "d_model": 32, "n_heads": 2, "d_ff": 64}


class ByteLM(nn.Module):
    """Embedding, one pre-norm causal attention + SwiGLU block, untied readout."""

    def __init__(self, n_vocab: int, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.hp = {"n_vocab": n_vocab, "d_model": d_model, "n_heads": n_heads, "d_ff": d_ff}
        self.tok = nn.Embedding(n_vocab, d_model)
        self.pre_mix, self.pre_ffn, self.final = (nn.RMSNorm(d_model) for _ in range(3))
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.wo = nn.Linear(d_model, d_model, bias=False)
        self.gate, self.up = nn.Linear(d_model, d_ff, bias=False), nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)
        self.readout = nn.Linear(d_model, n_vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids)
        b, t, d = x.shape
        heads = lambda z: z.view(b, t, self.hp["n_heads"], -1).transpose(1, 2)  # noqa: E731
        q, k, v = (heads(z) for z in self.qkv(self.pre_mix(x)).chunk(3, dim=-1))
        x = x + self.wo(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        h = self.pre_ffn(x)
        return self.readout(self.final(x + self.down(F.silu(self.gate(h)) * self.up(h))))


def next_byte_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The runtime's loss: logits[:, :-1] predict ids[:, 1:]; every position scored."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))


def save(model: ByteLM, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    torch.save({"hparams": model.hp, "weights": model.state_dict()}, directory / FILENAME)
    (directory / "config.json").write_text(json.dumps({"vocab_size": model.hp["n_vocab"]}))


def load(directory: Path) -> ByteLM:
    blob = torch.load(Path(directory) / FILENAME, map_location="cpu", weights_only=True)
    model = ByteLM(**blob["hparams"])
    model.load_state_dict(blob["weights"])
    return model


def as_ids(batch: Batch, capability: str) -> torch.Tensor:
    """A Batch as the runtime's windows: inputs plus the last target, when targets are exactly the
    inputs shifted by one and nothing is masked; anything else the runtime cannot take."""
    if bool((batch.targets < 0).any()) or not torch.equal(batch.targets[:, :-1], batch.inputs[:, 1:]):
        raise CapabilityMissing(capability, detail="the runtime scores every next byte of contiguous windows")
    return torch.cat([batch.inputs, batch.targets[:, -1:]], dim=1)


class ByteModel(RuntimeModel):
    loss_function = staticmethod(next_byte_loss)

    def __init__(self, net: ByteLM, settings: TrainSettings | None):
        self.net, self.settings = net, settings
        if settings is not None:
            self.optimizer = torch.optim.AdamW(net.parameters(), lr=settings.lr, betas=tuple(settings.betas),
                                               eps=settings.eps, weight_decay=settings.weight_decay)

    def logits(self, inputs):
        self.net.eval()
        with torch.no_grad():
            return self.net(inputs)

    def loss(self, batch):
        ids = as_ids(batch, LOSS)
        with torch.no_grad():
            return float(self.loss_function(self.net(ids), ids))

    def train_step(self, batch):
        if self.settings.micro_batches > 1 or self.settings.grad_clip > 0 or self.settings.warmup_steps:
            raise CapabilityMissing(TRAIN_STEP, detail="this test runtime trains at a constant lr, unclipped")
        ids = as_ids(batch, TRAIN_STEP)
        self.net.train()
        loss = self.loss_function(self.net(ids), ids)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def state(self):
        return dict(self.net.state_dict())          # its own names: tok.weight, qkv.weight, ...

    def gradients(self):
        return {name: p.grad for name, p in self.net.named_parameters() if p.grad is not None}

    def save(self, directory):
        save(self.net, directory)                   # one torch.save file + config.json

    def evaluate(self, batches):
        windows = [as_ids(b, EVALUATE) for b in batches]
        with torch.no_grad():
            total = sum(float(self.loss_function(self.net(w), w)) * w[:, 1:].numel() for w in windows)
        return total / sum(w[:, 1:].numel() for w in windows)


class ByteAdapter(RuntimeAdapter):
    paths = (REFERENCE,)
    model_class = ByteModel

    def version(self) -> str:
        return "bytelm 0.1"

    def load(self, checkpoint, *, device, path=REFERENCE, init="trained", seed=0, train=None):
        if device != "cpu":
            raise CapabilityMissing("load", detail="this test runtime runs on the cpu only")
        if init == RANDOM:
            torch.manual_seed(seed)
            net = ByteLM(**torch.load(Path(checkpoint) / FILENAME, weights_only=True)["hparams"])
        else:
            net = load(checkpoint)
        return self.model_class(net, train)


class UnshiftedModel(ByteModel):
    """The planted bug at the adapter's seam: a loss that scores the current byte, not the next."""
    loss_function = staticmethod(lambda logits, ids: F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                                                      ids.reshape(-1)))


class UnshiftedAdapter(ByteAdapter):
    model_class = UnshiftedModel


def subject(tmp: Path, *, train_windows: bool = True, steps: int = 40) -> Path:
    """A subject trained by the runtime itself for `steps` steps on a repetitive byte corpus."""
    data = torch.tensor(list(b"a stitch in time saves nine; the quick brown fox. " * 20), dtype=torch.int64)
    generator = torch.Generator().manual_seed(0)

    def windows(count: int, start: int, stop: int) -> list[Batch]:
        out = []
        for _ in range(count):
            rows = torch.stack([data[s:s + 17] for s in torch.randint(start, stop - 17, (4,), generator=generator)])
            out.append(Batch(rows[:, :-1].contiguous(), rows[:, 1:].contiguous()))
        return out

    torch.manual_seed(0)
    net = ByteLM(**HPARAMS)
    model = ByteModel(net, TrainSettings(lr=3e-3))
    cut = len(data) * 9 // 10
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains ten times faster on one core of a busy machine
    try:
        for batch in windows(steps, 0, cut):
            model.train_step(batch)
    finally:
        torch.set_num_threads(threads)
    save(net, tmp / "checkpoint")
    return subjects.write(tmp / "subject", name="bytelm-trained", checkpoint=tmp / "checkpoint",
                          heldout=windows(4, cut, len(data)), train=windows(8, 0, cut),
                          train_windows=windows(2, 0, cut) if train_windows else None,
                          prompts=[data[:8].tolist()])
