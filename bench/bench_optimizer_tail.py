"""The end of a training step alone — gradient norm, clip, AdamW, non-finite skip — in the forms
a runtime could take, on a model's parameter shapes.

    python bench/bench_optimizer_tail.py                      # qwen2-0.5b's 290 tensors, on CUDA
    python bench/bench_optimizer_tail.py --preset tiny --device cpu --steps 3   # a smoke run

Forms (same shapes, random fp32 parameters and gradients; clipping active):
  torch      the runtime's tail: trainer.global_grad_norm, trainer.clip_gradients, torch's
             fused AdamW skipping through `found_inf` (pvlab.runtime.trainer's own functions)
  fused      torch's fused AdamW alone;  norm  the gradient norm alone
  scale      the norm, then the fused AdamW with the clip as its `grad_scale`
  compiled   torch.compile of torch's own foreach AdamW (capturable, tensor learning rate; no clip)
  one-fn     one torch.compile'd function: norm, clip, the AdamW update and the skip (torch.where),
             a loop over the tensors

Each form: the mean of --steps steps after 3 warm-up steps, timed with CUDA events, then the
same steps replayed from one captured CUDA graph (as the runtime's graphed step runs them). The
bytes figure assumes 28 bytes a parameter (read parameter, gradient and two moments; write
parameter and moments): what an ideal AdamW moves. Forms are alternatives, not a baseline and
its rivals: compare rows of one run (docs/performance.md, "The optimizer's tail compiled").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pvlab.runtime import config as runtime_config, trainer  # noqa: E402

BETAS, EPS, WEIGHT_DECAY, MAX_NORM = (0.9, 0.95), 1e-8, 0.1, 1.0


def parameter_shapes(preset: str) -> list[tuple[int, ...]]:
    """The model's trainable tensors, as the runtime holds them (tied head: one embedding)."""
    c = runtime_config.preset(preset)
    hidden, inner, kv = c.hidden_size, c.intermediate_size, c.num_key_value_heads * c.attention_head_dim
    q = c.num_attention_heads * c.attention_head_dim
    shapes: list[tuple[int, ...]] = [(c.vocab_size, hidden)]
    for _ in range(c.num_hidden_layers):
        shapes += [(q, hidden), (kv, hidden), (kv, hidden), (hidden, q), (inner, hidden), (inner, hidden),
                   (hidden, inner), (hidden,), (hidden,)]
        if c.qkv_bias:
            shapes += [(q,), (kv,), (kv,)]
    return shapes + [(hidden,)]


def make(shapes, device):
    generator = torch.Generator(device=device).manual_seed(0)
    parameters = [torch.randn(s, device=device, generator=generator) for s in shapes]
    gradients = [torch.randn(s, device=device, generator=generator) * 0.1 for s in shapes]
    return parameters, gradients


def one_function(parameters, gradients, exp_avgs, exp_avg_sqs, step, lr, finite):
    """norm, clip, AdamW and skip in one function (the `one-fn` form)."""
    total = trainer.global_grad_norm(gradients)
    clip = torch.clamp(MAX_NORM / (total + 1e-6), max=1.0)
    new_step = step + finite.to(torch.float32)
    step.copy_(new_step)
    correction1, correction2 = 1 - BETAS[0] ** new_step, 1 - BETAS[1] ** new_step
    for p, g, m, v in zip(parameters, gradients, exp_avgs, exp_avg_sqs):
        g = g * clip
        m_new = m * BETAS[0] + g * (1 - BETAS[0])
        v_new = v * BETAS[1] + g * g * (1 - BETAS[1])
        p_new = p * (1 - lr * WEIGHT_DECAY) - lr * (m_new / correction1) / ((v_new / correction2).sqrt() + EPS)
        m.copy_(torch.where(finite, m_new, m))
        v.copy_(torch.where(finite, v_new, v))
        p.copy_(torch.where(finite, p_new, p))
    return total


def forms(shapes, device):
    """(name, step function) for each form, each over its own tensors; built lazily."""
    def torch_tail(fused_clip: bool, with_norm: bool = True):
        parameters, gradients = make(shapes, device)
        for p, g in zip(parameters, gradients):
            p.grad = g
        optimizer = torch.optim.AdamW(parameters, lr=torch.tensor(1e-4, device=device), betas=BETAS, eps=EPS,
                                      weight_decay=WEIGHT_DECAY, fused=True, capturable=True)
        skip = torch.zeros((), device=device)

        def step():
            if with_norm:
                total = trainer.global_grad_norm(gradients)
                if fused_clip:
                    optimizer.grad_scale = torch.clamp((total + 1e-6) / MAX_NORM, min=1.0)
                else:
                    trainer.clip_gradients(gradients, MAX_NORM, total)
            optimizer.found_inf = skip
            optimizer.step()
            del optimizer.found_inf
            if fused_clip:
                del optimizer.grad_scale
        return step

    def norm_only():
        _, gradients = make(shapes, device)
        return lambda: trainer.global_grad_norm(gradients)

    def compiled_torch():
        parameters, gradients = make(shapes, device)
        for p, g in zip(parameters, gradients):
            p.grad = g
        optimizer = torch.optim.AdamW(parameters, lr=torch.tensor(1e-4, device=device), betas=BETAS, eps=EPS,
                                      weight_decay=WEIGHT_DECAY, foreach=True, capturable=True)
        return torch.compile(optimizer.step)

    def compiled_one_function():
        parameters, gradients = make(shapes, device)
        exp_avgs, exp_avg_sqs = [torch.zeros_like(p) for p in parameters], [torch.zeros_like(p) for p in parameters]
        step, lr = torch.zeros((), device=device), torch.tensor(1e-4, device=device)
        finite = torch.ones((), dtype=torch.bool, device=device)
        function = torch.compile(one_function)
        return lambda: function(parameters, gradients, exp_avgs, exp_avg_sqs, step, lr, finite)

    return [("torch", lambda: torch_tail(False)), ("fused", lambda: torch_tail(False, with_norm=False)),
            ("norm", norm_only), ("scale", lambda: torch_tail(True)), ("compiled", compiled_torch),
            ("one-fn", compiled_one_function)]


def timed(step, steps: int, device: str) -> float:
    """Mean milliseconds per step after three warm-up steps."""
    for _ in range(3):
        step()
    if device != "cuda":
        start = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - start) * 1e3 / steps
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(steps):
        step()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / steps


def as_graph(step):
    """The step captured as one CUDA graph (warmed on a side stream first, as torch requires)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="qwen2-0.5b", help="runtime model preset whose shapes to use")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--only", default="", help="comma-separated forms to run (default: all)")
    args = parser.parse_args()
    shapes = parameter_shapes(args.preset)
    count = sum(torch.Size(s).numel() for s in shapes)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"# {args.preset}: {count / 1e6:.1f}M parameters in {len(shapes)} tensors; {name}, torch {torch.__version__}")
    print("| form | ms a step | TB/s at 28 B/param | as a CUDA graph: ms | TB/s | set-up (compile) |")
    print("|---|---|---|---|---|---|")
    wanted = {w for w in args.only.split(",") if w}
    for label, build in forms(shapes, args.device):
        if wanted and label not in wanted:
            continue
        start = time.perf_counter()
        step = build()
        step()
        setup = time.perf_counter() - start
        ms = timed(step, args.steps, args.device)
        graphed = timed(as_graph(step), args.steps, args.device) if args.device == "cuda" else None
        rate = lambda t: f"{28 * count / (t * 1e-3) / 1e12:.2f}"  # noqa: E731
        updates = label != "norm"   # the bytes figure is an update's; the norm reads 4 bytes a parameter
        cells = [f"{ms:.3f}", rate(ms) if updates else "-", "-" if graphed is None else f"{graphed:.3f}",
                 "-" if graphed is None or not updates else rate(graphed), f"{setup:.0f} s"]
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
        del step
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
