"""Probes of nanotrainer's blind batch of planted bugs (examples/nanotrainer/adoption/
nanotrainer_checks/mutants.py, under "blind batch"; docs/independent-mutants.md, "Eleventh
batch"): each is a cheap direct call into nanotrainer (or its adapter) whose result changes while
its mutant is active and is bit for bit the clean result again afterwards. A bug that changes
nothing would make every falsifier look blind (or strong).

    python tests/examples_data/nanotrainer_blind_probes.py   # from the repository root

puts examples/nanotrainer and its adoption/ on sys.path (a process of its own: tests/test_examples.py
runs it so that neither `nanotrainer` nor its mutant registrations leak into pytest's process) and
prints one line per probe, `<mutant> changed|UNCHANGED|NOT-RESTORED`; exit 1 if any is not `changed`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "examples" / "nanotrainer"), str(ROOT / "examples" / "nanotrainer" / "adoption")]

import torch  # noqa: E402

from nanotrainer import data, model, train  # noqa: E402
from nanotrainer_checks import adapter, mutants  # noqa: E402
from pvpack.protocol import IGNORE_INDEX, Batch, TrainSettings  # noqa: E402

torch.set_num_threads(1)
IDS = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(3))


def gpt(path: str = "reference", seed: int = 0, scale: float = 1.0) -> model.GPT:
    """nanotrainer's random model, its gains and biases moved off their init (1, 0) so that a bug
    reading them shows; `scale` multiplies the matrices (init std 0.02 * scale: a random model
    whose greedy output depends on its context, whose gradients are large)."""
    torch.manual_seed(seed)
    net = model.GPT(model.GPTConfig())
    with torch.no_grad():
        for p in net.parameters():
            if p.dim() < 2:
                p.add_(0.1 * torch.randn_like(p))
            else:
                p.mul_(scale)
    return net.set_path(path)


def logits(path: str = "reference"):
    with torch.no_grad():
        return gpt(path).eval()(IDS)


def one_step(tc: train.TrainConfig):
    net = gpt()
    trainer = train.Trainer(net, tc)
    trainer.train_step(IDS)
    return {name: p.detach().clone() for name, p in net.named_parameters()}


def probe_nano_block_mlp_skips_norm():
    return logits()


def probe_nano_mlp_gelu_tanh_approximation():
    return logits()


def probe_nano_rope_frequencies_over_head_dim():
    return logits()


def probe_nano_heads_split_without_transpose():
    """The first position's logits, for inputs that differ after it only (its future)."""
    changed = IDS.clone()
    changed[:, 1:] = (changed[:, 1:] + 1) % 64
    with torch.no_grad():
        net = gpt().eval()
        return net(changed)[:, 0] - net(IDS)[:, 0]


def probe_nano_reference_scores_scaled_by_model_width():
    return logits("reference")


def probe_nano_fused_qkv_key_value_swapped():
    return logits("fast")


def probe_nano_evaluate_counts_padding():
    labels = IDS.clone()
    labels[1, 12:] = IGNORE_INDEX
    return train.evaluate(gpt(), [(IDS, labels)])


def probe_nano_decay_on_norms_and_biases():
    return one_step(train.TrainConfig(weight_decay=0.5, warmup_steps=1))


def probe_nano_cosine_progress_from_step_zero():
    tc = train.TrainConfig()
    return [train.lr_at(step, tc) for step in range(tc.total_steps + 5)]


def probe_nano_clip_matrices_only():
    return one_step(train.TrainConfig(grad_clip=1e-3, warmup_steps=1))


def probe_nano_save_rounds_to_bfloat16():
    with tempfile.TemporaryDirectory() as directory:
        train.save(gpt(), directory)
        return train.load(directory).state_dict()


def probe_nano_generate_window_keeps_oldest():
    prompt = torch.randint(0, 64, (1, 60), generator=torch.Generator().manual_seed(5))
    return train.generate(gpt(scale=25.0), prompt, 12)


def probe_nano_corpus_train_includes_heldout():
    split = data.corpus(64, tokens=2_000)
    return split["train"], split["heldout"]


def probe_nano_adapter_grad_clip_not_passed():
    with tempfile.TemporaryDirectory() as directory:
        train.save(gpt(scale=25.0), directory)
        loaded = adapter.NanoTrainerAdapter().load(Path(directory), device="cpu",
                                                   train=TrainSettings(lr=1e-3, grad_clip=0.0))
        loaded.train_step(Batch(IDS[:, :-1].contiguous(), IDS[:, 1:].contiguous()))
        return {name: g.clone() for name, g in loaded.gradients().items()}


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def main() -> int:
    probes = {name.removeprefix("probe_"): fn for name, fn in globals().items() if name.startswith("probe_")}
    failures = 0
    for name, probe in probes.items():
        clean = probe()
        with getattr(mutants, name)():
            planted = probe()
        again = probe()
        verdict = "NOT-RESTORED" if not same(clean, again) else "UNCHANGED" if same(clean, planted) else "changed"
        failures += verdict != "changed"
        print(f"{name} {verdict}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
