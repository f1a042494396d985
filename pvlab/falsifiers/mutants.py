"""Planted bugs (mutants): each breaks the runtime in one named way for the duration of one run.

`pv strength` runs every falsifier under the mutants its contract declares and expects it to
FAIL (the mutant is *killed*); a PASS means the falsifier is blind to that bug (*survived*).
See docs/mutants.md for the catalogue, the kill matrix and how to add one.

Every mutant here is a generator declared with `@mutant("snake_name")` whose docstring names the
real defect it imitates. It patches the runtime on entry and restores it in `finally` (the
`with _planted(...)` block below is that try/finally), so it is never active outside its run:

* The patches replace module attributes that the runtime looks up *at call time*
  (`runtime.kernels.NAME`, `runtime.trainer.eval_targets`, a method of a runtime class, ...),
  in the module that defines them and in every `runtime.*` module that imported the same
  object by name (`from .devices import resolve_device`), so no import-time binding escapes.
* While a mutant is active, a checkpoint that the shared cache (runtime.zoo) has to build is
  built with the mutant *suspended*: a planted bug never leaks into `.pv-cache/`.
* In-process fixture caches of the check package (`functools.lru_cache` functions such as
  falsifiers.fixtures.random_model) are dropped when a mutant is entered and when it is left,
  so a model built with the bug is never reused without it, nor a clean one under it. Under
  `pytest --pv-mutant NAME` (one mutant for the whole process, entered around every check call)
  they are kept between the calls of that one mutant.
* Child Python processes started while a mutant is active (a check that runs
  `python -m pvlab.runtime ...`) get the same mutant: PYTHONPATH gains a directory whose
  `sitecustomize.py` enters it by name before the child's own code runs. The runtime honours
  no test hook of any kind; without the environment variables the directory does nothing.

This module imports nothing heavy at import time (pv reads the registry just to list names);
torch and the runtime are imported when a mutant is entered.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any, Callable, Iterator

from pv.mutation import mutant

PACKAGE = __name__.rpartition(".")[0] or __name__
CHILD_ENV = "PV_MUTANT_IN_CHILD"  # "<module>:<mutant name>", read by the sitecustomize below


# ---- the patch machinery -----------------------------------------------------------------------


class _Swap:
    """Replace `owner.name` (a module or class attribute) by `new`; restore it exactly on stop.

    The raw entry of the owner's __dict__ is saved (so a property, staticmethod or plain
    function of a class comes back as it was) and an attribute that the owner did not define
    itself (inherited) is deleted again rather than shadowed."""

    def __init__(self, owner: Any, name: str, new: Any):
        self.owner, self.name, self.new = owner, name, new
        self.had_own = False
        self.original: Any = None

    def start(self) -> None:
        namespace = vars(self.owner)
        self.had_own = self.name in namespace
        self.original = namespace.get(self.name)
        setattr(self.owner, self.name, self.new)

    def stop(self) -> None:
        if self.had_own:
            setattr(self.owner, self.name, self.original)
        else:
            delattr(self.owner, self.name)

    def __repr__(self) -> str:
        owner = getattr(self.owner, "__name__", type(self.owner).__name__)
        return f"{owner}.{self.name}"


class _ItemSwap:
    """Replace `mapping[key]`; restore (or remove) it on stop."""

    _MISSING = object()

    def __init__(self, mapping: Any, key: str, new: Any, label: str = ""):
        self.mapping, self.key, self.new, self.label = mapping, key, new, label
        self.original: Any = self._MISSING

    def start(self) -> None:
        self.original = self.mapping.get(self.key, self._MISSING)
        if self.new is self._MISSING:
            self.mapping.pop(self.key, None)
        else:
            self.mapping[self.key] = self.new

    def stop(self) -> None:
        if self.original is self._MISSING:
            self.mapping.pop(self.key, None)
        else:
            self.mapping[self.key] = self.original

    def __repr__(self) -> str:
        return f"{self.label or 'mapping'}[{self.key!r}]"


def _runtime_modules() -> list[Any]:
    import pvlab.runtime  # noqa: F401 - imports the package's modules so their bindings exist

    return [m for n, m in sorted(sys.modules.items()) if m is not None and (n == "pvlab.runtime" or n.startswith("pvlab.runtime."))]


def _swap_everywhere(module: Any, name: str, new: Any) -> list[_Swap]:
    """Swaps for `module.name` and for every runtime module that bound the same object by name."""
    original = getattr(module, name)
    swaps = [_Swap(module, name, new)]
    for other in _runtime_modules():
        if other is not module and vars(other).get(name) is original:
            swaps.append(_Swap(other, name, new))
    return swaps


_ACTIVE: list[Any] = []  # swaps of the mutant(s) active in this process, in the order applied
_CACHE_OWNER: str | None = None  # the mutant whose run filled the check package's caches
_ENTERED: list[str] = []  # names of the active mutants (for tests and the child-process hook)


def _check_caches() -> list[Any]:
    out = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == PACKAGE or name.startswith(PACKAGE + ".")) or name == __name__:
            continue
        for value in list(vars(module).values()):
            if callable(getattr(value, "cache_clear", None)) and not isinstance(value, type):
                out.append(value)
    return out


def _forget_check_caches() -> None:
    for cached in _check_caches():
        cached.cache_clear()


def _plugin_mutant() -> str | None:
    """The mutant pytest's pv plugin wraps every check call in (None outside such a run)."""
    harness = sys.modules.get("pv.harness")
    return harness.active_mutant() if harness is not None else None


@contextlib.contextmanager
def _suspended() -> Iterator[None]:
    """Lift every active mutant for the duration (clean code), then plant them again."""
    lifted = list(_ACTIVE)
    for swap in reversed(lifted):
        swap.stop()
    try:
        yield
    finally:
        for swap in lifted:
            swap.start()


def _guards() -> list[Any]:
    """Swaps every mutant carries besides its own: clean builds of cached checkpoints, and the
    environment that plants the same mutant in child Python processes."""
    from pvlab.runtime import zoo

    build_cached = zoo.build_cached

    @functools.wraps(build_cached)
    def clean_build_cached(*args: Any, **kwargs: Any) -> Any:
        with _suspended():
            return build_cached(*args, **kwargs)

    return _swap_everywhere(zoo, "build_cached", clean_build_cached)


def _child_env(name: str) -> list[_ItemSwap]:
    hook = _child_hook_dir()
    root = str(Path(__file__).resolve().parents[PACKAGE.count(".") + 1])
    path = os.pathsep.join([hook, root, *filter(None, [os.environ.get("PYTHONPATH")])])
    return [_ItemSwap(os.environ, "PYTHONPATH", path, "os.environ"),
            _ItemSwap(os.environ, CHILD_ENV, f"{__name__}:{name}", "os.environ")]


@contextlib.contextmanager
def _planted(name: str, *swaps: Any) -> Iterator[None]:
    """Apply `swaps` (plus the guards) for the body; undo them, last first, whatever happens."""
    global _CACHE_OWNER
    if _CACHE_OWNER != name:
        _forget_check_caches()
        _CACHE_OWNER = name
    applied: list[Any] = []
    try:
        for swap in (*_guards(), *_child_env(name), *swaps):
            swap.start()
            applied.append(swap)
            _ACTIVE.append(swap)
        _ENTERED.append(name)
        yield
    finally:
        if _ENTERED and _ENTERED[-1] == name:
            _ENTERED.pop()
        for swap in reversed(applied):
            swap.stop()
            _ACTIVE.remove(swap)
        if _plugin_mutant() != name:
            _forget_check_caches()
            _CACHE_OWNER = None


def active() -> list[str]:
    """Names of the mutants active in this process right now (normally none or one)."""
    return list(_ENTERED)


# ---- child processes ---------------------------------------------------------------------------

_SITECUSTOMIZE = '''\
"""Written by {module}: plants the mutant named in ${env} in this Python process."""
import os as _os
import sys as _sys


def _chain_to_the_real_sitecustomize():
    here = _os.path.dirname(_os.path.abspath(__file__))
    saved = list(_sys.path)
    _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    mine = _sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401 - the interpreter's own, if there is one
    except ImportError:
        pass
    finally:
        _sys.path[:] = saved
        if mine is not None:
            _sys.modules["sitecustomize"] = mine


_chain_to_the_real_sitecustomize()
_wanted = _os.environ.get("{env}", "")
if _wanted:
    try:
        import importlib as _importlib

        _module, _, _name = _wanted.partition(":")
        _importlib.import_module(_module)._enter_for_process(_name)
    except Exception as _exc:  # never break the child: say so, loudly
        _sys.stderr.write(f"pv: could not plant mutant {{_wanted!r}} in this process: {{_exc!r}}\\n")
'''

_HOOK_DIR: str | None = None


def _child_hook_dir() -> str:
    global _HOOK_DIR
    if _HOOK_DIR is None or not os.path.isdir(_HOOK_DIR):
        _HOOK_DIR = tempfile.mkdtemp(prefix="pv-mutant-hook-")
        Path(_HOOK_DIR, "sitecustomize.py").write_text(
            _SITECUSTOMIZE.format(module=__name__, env=CHILD_ENV), encoding="utf-8")
        atexit.register(shutil.rmtree, _HOOK_DIR, True)
    return _HOOK_DIR


def _enter_for_process(name: str) -> None:
    """Enter mutant `name` for the rest of this (child) process; called by the sitecustomize."""
    from pv import mutation

    registry = {k: v for k, v in mutation.REGISTRY.items() if v.module == __name__}
    context = mutation.get(registry, name)()
    context.__enter__()
    atexit.register(context.__exit__, None, None, None)


def _acts_on(*devices: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Where the planted bug can show: `pv strength` runs a mutant only on these devices (a
    mutant of the CUDA path alone that PASSes on the CPU is not blindness). Default: both."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.pv_devices = tuple(devices)  # type: ignore[attr-defined]
        return fn

    return mark


# =================================================================================================
# The seeds' defects (DESIGN.md, "Planted bugs"; the bug hunt)
# =================================================================================================


@mutant("fast_path_drops_qkv_bias")
def fast_path_drops_qkv_bias():
    """The fast path's linear kernel ignores the bias: Q/K/V biases of a Qwen2 model are never
    added (Llama's o_proj/MLP biases too, where a config has them).

    Imitates the bug hunt's CUDA forward path that silently dropped the Q/K/V biases
    (val_loss 18.55, above ln V = 17.21: worse than uniform). Seam: runtime.kernels.linear_fast,
    which the fast path runs on every device, so the CPU's fast path shows it as well."""
    from pvlab.runtime import kernels

    original = kernels.linear_fast

    def linear_fast(x, weight, bias):
        return original(x, weight, None)

    with _planted("fast_path_drops_qkv_bias", *_swap_everywhere(kernels, "linear_fast", linear_fast)):
        yield


@mutant("populate_drops_optional_tensors")
def populate_drops_optional_tensors():
    """Loading skips the optional tensors (every `.bias`): they are neither copied nor kept —
    the model ends up with no bias fields — yet the populate report says N/N, complete.

    Imitates the seed defect where upload/populate silently dropped the Q/K/V biases while the
    coverage check, which read the loader's own report, stayed green. Seam:
    runtime.checkpoint.populate (used by runtime.load and init_model with weights)."""
    import torch

    from pvlab.runtime import checkpoint

    def populate(model, tensors, plan):
        parameters = dict(model.named_parameters())
        for name in plan.found:
            if name.endswith(".bias"):
                continue
            value = tensors[name]
            checkpoint.copy_tensor(parameters[name], value() if callable(value) else value)
        for module in model.modules():
            if isinstance(getattr(module, "bias", None), torch.nn.Parameter):
                module.bias = None
        return checkpoint.PopulateReport(expected=plan.expected, found=plan.found, missing=plan.missing,
                                         extra=plan.extra, mismatched=plan.mismatched, ignored=plan.ignored,
                                         source=plan.source)

    with _planted("populate_drops_optional_tensors", *_swap_everywhere(checkpoint, "populate", populate)):
        yield


@mutant("eval_reads_stale_train_buffer")
def eval_reads_stale_train_buffer():
    """Eval reads a loss workspace that the last training step wrote instead of its own forward:
    after any training step, an eval-mode loss is the cross-entropy of training's leftover
    (one-hot) logit buffer against training's leftover targets — nearly zero, whatever the
    model and the eval batch. Before the first training step eval is correct.

    Imitates the bug hunt's eval path that reported val_loss 0.0008 (perplexity 1.0008) next to
    train_loss 1.20 at the same model state. Seam: runtime.model.CausalLM.loss (train mode with
    gradients = training; anything else = eval, which Trainer.eval_batch / evaluate use)."""
    import torch

    from pvlab.runtime import kernels
    from pvlab.runtime.model import CausalLM

    original = CausalLM.loss
    workspace: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def loss(self, input_ids, targets):
        if self.training and torch.is_grad_enabled():
            workspace[self] = targets.detach().clone()
            return original(self, input_ids, targets)
        stale = workspace.get(self)
        if stale is None:
            return original(self, input_ids, targets)
        buffer = torch.nn.functional.one_hot(stale.clamp(min=0), self.config.vocab_size).float() * 16.0
        return kernels.cross_entropy_reference(buffer, stale).to(targets.device)

    with _planted("eval_reads_stale_train_buffer", _Swap(CausalLM, "loss", loss)):
        yield


@mutant("eval_targets_equal_inputs")
def eval_targets_equal_inputs():
    """Eval scores each position against the input token itself instead of the next token
    (the targets are not shifted): eval measures copying, not prediction.

    Imitates the seed defect "eval targets equal the inputs" (a model trained that way reaches
    a near-zero eval loss). Seam: runtime.trainer.eval_targets, which Trainer.eval_batch calls
    to choose what eval scores."""
    from pvlab.runtime import trainer

    def eval_targets(batch):
        return batch.inputs

    with _planted("eval_targets_equal_inputs", *_swap_everywhere(trainer, "eval_targets", eval_targets)):
        yield


def _shift_one_more(hidden_or_logits, targets):
    """Position t's scores are matched with target t+1 (drops the last position / first target)."""
    length = targets.shape[-1]
    if length < 2:
        return hidden_or_logits, targets
    return hidden_or_logits.narrow(-2, 0, length - 1), targets.narrow(-1, 1, length - 1)


@mutant("cross_entropy_off_by_one")
def cross_entropy_off_by_one():
    """The loss shifts targets a second time: the logits at position t are scored against the
    token at t+2 (both the reference cross-entropy and the fast path's fused chunked one).

    Imitates the seed defect "cross-entropy off by one position" (a double shift between batch
    construction and the loss). Seams: runtime.kernels.cross_entropy_reference and
    runtime.kernels.chunked_linear_cross_entropy."""
    from pvlab.runtime import kernels

    reference, chunked = kernels.cross_entropy_reference, kernels.chunked_linear_cross_entropy

    def cross_entropy_reference(logits, targets):
        return reference(*_shift_one_more(logits, targets))

    def chunked_linear_cross_entropy(hidden, weight, targets, **kwargs):
        shifted_hidden, shifted_targets = _shift_one_more(hidden, targets)
        return chunked(shifted_hidden, weight, shifted_targets, **kwargs)

    with _planted("cross_entropy_off_by_one",
                  *_swap_everywhere(kernels, "cross_entropy_reference", cross_entropy_reference),
                  *_swap_everywhere(kernels, "chunked_linear_cross_entropy", chunked_linear_cross_entropy)):
        yield


@mutant("tied_head_uninitialised")
def tied_head_uninitialised():
    """A model with tie_word_embeddings gets its own, never-filled output head instead of sharing
    the (trained) embedding: the head is a fresh zero buffer, so every logit is 0.

    Imitates the seed defect "tied head replaced by an uninitialised one" (a device upload that
    allocated a separate lm_head buffer for a tied checkpoint, which holds no lm_head.weight, and
    never filled it). Seam: runtime.parity.place, the step every load()/init_model() ends with."""
    import torch

    from pvlab.runtime import parity

    original = parity.place

    def place(model, device, path, **kwargs):
        if model.config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight:
            model.lm_head.weight = torch.nn.Parameter(torch.zeros_like(model.lm_head.weight.detach()))
        return original(model, device, path, **kwargs)

    with _planted("tied_head_uninitialised", *_swap_everywhere(parity, "place", place)):
        yield


@mutant("rope_wrong_theta")
def rope_wrong_theta():
    """RoPE ignores the configured θ and uses a hard-coded 1e6 (Qwen2's published value), so a
    model configured with θ = 10000 (the tiny preset, Llama) rotates at the wrong frequencies.

    Imitates the seed defect "wrong RoPE θ". Seam: runtime.kernels.rope_cos_sin."""
    from pvlab.runtime import kernels

    original = kernels.rope_cos_sin

    def rope_cos_sin(theta, head_dim, positions):
        return original(1_000_000.0, head_dim, positions)

    with _planted("rope_wrong_theta", *_swap_everywhere(kernels, "rope_cos_sin", rope_cos_sin)):
        yield


@mutant("rope_interleaved_pairs")
def rope_interleaved_pairs():
    """RoPE rotates adjacent pairs (x0, x1), (x2, x3), ... (the GPT-J/interleaved layout) while
    the cos/sin tables and the checkpoints use the rotate_half layout (x_i, x_{i+D/2}).

    Imitates the seed defect "wrong RoPE rotation" (a layout mismatch between an implementation
    and the weights). Seam: runtime.kernels.rotate_half."""
    import torch

    from pvlab.runtime import kernels

    def rotate_half(x):
        pairs = x.unflatten(-1, (-1, 2))
        return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)

    with _planted("rope_interleaved_pairs", *_swap_everywhere(kernels, "rotate_half", rotate_half)):
        yield


@mutant("final_norm_skipped")
def final_norm_skipped():
    """The RMSNorm between the last decoder layer and the output head is skipped: the head sees
    the raw residual stream.

    Imitates the seed defect "final norm skipped". Seam: runtime.model.apply_final_norm."""
    from pvlab.runtime import model

    def apply_final_norm(norm, hidden):
        return hidden

    with _planted("final_norm_skipped", *_swap_everywhere(model, "apply_final_norm", apply_final_norm)):
        yield


@mutant("adamw_coupled_weight_decay")
def adamw_coupled_weight_decay():
    """The optimizer is Adam with L2 regularisation (weight decay added to the gradient, where
    Adam's normalisation cancels most of it) instead of AdamW's decoupled decay.

    Imitates the seed defect "AdamW weight decay coupled (L2)". Seam:
    runtime.trainer.build_optimizer (same parameter groups, same decay policy)."""
    import torch

    from pvlab.runtime import trainer

    def build_optimizer(named_parameters, *, lr, weight_decay, betas, path, device):
        decayed = [p for n, p in named_parameters if trainer.decays(n, p)]
        undecayed = [p for n, p in named_parameters if not trainer.decays(n, p)]
        return torch.optim.Adam([{"params": decayed, "weight_decay": weight_decay},
                                 {"params": undecayed, "weight_decay": 0.0}], lr=lr, betas=betas, eps=1e-8)

    with _planted("adamw_coupled_weight_decay", *_swap_everywhere(trainer, "build_optimizer", build_optimizer)):
        yield


@mutant("greedy_decode_samples")
def greedy_decode_samples():
    """Temperature 0 samples from softmax(logits) instead of taking the argmax (from a generator
    seeded once per run, so the draws differ from call to call but the run is reproducible).

    Imitates the seed defect "greedy decode samples" (the bug hunt's GPU decode printed gibberish
    while the CPU path answered "2 + 2 equals 4."). Seam: runtime.kernels.pick_next_token."""
    import torch

    from pvlab.runtime import kernels

    original = kernels.pick_next_token
    generators: dict[str, Any] = {}

    def pick_next_token(logits, temperature, generator, top_k=None):
        if temperature != 0:
            return original(logits, temperature, generator, top_k)
        key = str(logits.device)
        if key not in generators:
            generators[key] = torch.Generator(device=logits.device).manual_seed(1234)
        return kernels.sample_pick(logits, 1.0, generators[key], top_k)

    with _planted("greedy_decode_samples", *_swap_everywhere(kernels, "pick_next_token", pick_next_token)):
        yield


@mutant("no_gpu_ignored")
@_acts_on("cuda")
def no_gpu_ignored():
    """`--no-gpu` (allow_gpu=False) is ignored: the device is resolved as if the GPU were allowed,
    so `run --no-gpu` asks torch.cuda and, on a machine with a GPU, creates a CUDA context and
    runs there.

    Imitates the seed defect "--no-gpu ignored (touches CUDA)". Seam:
    runtime.devices.resolve_device, everywhere it is bound (runtime.checkpoint, runtime.trainer,
    runtime.pretrain and the package; `python -m pvlab.runtime run` imports it at call time). It
    reaches `python -m pvlab.runtime` child processes through the sitecustomize hook. On a machine
    without a GPU there is no CUDA context to create: the falsifier is CUDA-only."""
    from pvlab.runtime import devices

    original = devices.resolve_device

    def resolve_device(requested=None, *, allow_gpu=True, argument="device"):
        return original(requested, allow_gpu=True, argument=argument)

    with _planted("no_gpu_ignored", *_swap_everywhere(devices, "resolve_device", resolve_device)):
        yield


@mutant("kv_cache_off_by_one")
def kv_cache_off_by_one():
    """Tokens appended after a KV cache get positions one too far (past_length + 1 ...): the
    prompt is right, every decoded token is rotated as if it stood one place later.

    Imitates the seed defect "KV cache off by one" (decode position = sequence length instead of
    sequence length - 1). Seam: runtime.kernels.positions_for."""
    import torch

    from pvlab.runtime import kernels

    original = kernels.positions_for

    def positions_for(past_length, num_new, device):
        if past_length <= 0:
            return original(past_length, num_new, device)
        return torch.arange(past_length + 1, past_length + 1 + num_new, device=device)

    with _planted("kv_cache_off_by_one", *_swap_everywhere(kernels, "positions_for", positions_for)):
        yield


@mutant("softmax_without_max_subtraction")
def softmax_without_max_subtraction():
    """softmax and log-softmax exponentiate the raw logits, without subtracting the row maximum:
    exp(1e4) overflows to inf (NaN probabilities) and exp(-1e4) underflows to 0 (0/0).

    Imitates the seed defect "softmax without max subtraction". Seams:
    runtime.kernels.softmax_reference (reference attention, sampling) and
    runtime.kernels.log_softmax_reference (the reference cross-entropy)."""
    import torch

    from pvlab.runtime import kernels

    def softmax_reference(scores):
        exponentials = torch.exp(scores)
        return exponentials / exponentials.sum(dim=-1, keepdim=True)

    def log_softmax_reference(logits):
        return logits - torch.log(torch.exp(logits).sum(dim=-1, keepdim=True))

    with _planted("softmax_without_max_subtraction",
                  *_swap_everywhere(kernels, "softmax_reference", softmax_reference),
                  *_swap_everywhere(kernels, "log_softmax_reference", log_softmax_reference)):
        yield


# =================================================================================================
# Kernel defects: one or more for every kernel falsifier (a falsifier with no mutant is UNPROVEN)
# =================================================================================================


@mutant("rms_norm_eps_outside_sqrt")
def rms_norm_eps_outside_sqrt():
    """RMSNorm divides by sqrt(mean(x^2)) + eps instead of sqrt(mean(x^2) + eps): invisible for
    activations of size 1, a factor of ten off for activations of size 1e-4.

    Imitates a common hand-written-norm defect (eps placement). Seam: runtime.kernels.rms_norm."""
    import torch

    from pvlab.runtime import kernels

    def rms_norm(x, weight, eps):
        x32 = x.to(torch.float32)
        normalised = x32 / (x32.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps)
        return weight * normalised.to(x.dtype)

    with _planted("rms_norm_eps_outside_sqrt", *_swap_everywhere(kernels, "rms_norm", rms_norm)):
        yield


@mutant("rms_norm_ignores_weight")
def rms_norm_ignores_weight():
    """RMSNorm normalises but never multiplies by its learned weight (every norm acts as if its
    weight were all ones).

    Imitates a loader/kernel defect where norm weights are dropped. Seam: runtime.kernels.rms_norm."""
    import torch

    from pvlab.runtime import kernels

    original = kernels.rms_norm

    def rms_norm(x, weight, eps):
        return original(x, torch.ones_like(weight), eps)

    with _planted("rms_norm_ignores_weight", *_swap_everywhere(kernels, "rms_norm", rms_norm)):
        yield


@mutant("rms_norm_statistic_in_fp16")
def rms_norm_statistic_in_fp16():
    """RMSNorm computes mean(x^2) in float16: activations above ~256 square past fp16's 65504 and
    the norm turns to 0 or NaN.

    Imitates the half-precision norm defect (statistics accumulated in the activation's
    reduced dtype). Seam: runtime.kernels.rms_norm."""
    import torch

    from pvlab.runtime import kernels

    def rms_norm(x, weight, eps):
        x16 = x.to(torch.float16)
        normalised = x16 * torch.rsqrt(x16.pow(2).mean(dim=-1, keepdim=True) + eps)
        return weight * normalised.to(x.dtype)

    with _planted("rms_norm_statistic_in_fp16", *_swap_everywhere(kernels, "rms_norm", rms_norm)):
        yield


@mutant("rope_angles_in_bfloat16")
def rope_angles_in_bfloat16():
    """RoPE angles (position × frequency) are computed in bfloat16: positions above 256 round to
    multiples of 2, 4, 8, ... and every angle carries a ~0.4 % error, so rotations are wrong and
    no longer depend on relative distance alone.

    Imitates the known long-context defect of computing rotary angles under bf16 autocast.
    Seam: runtime.kernels.rope_cos_sin."""
    import torch

    from pvlab.runtime import kernels

    def rope_cos_sin(theta, head_dim, positions):
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device)
        inverse_frequency = (1.0 / (theta ** (exponents / head_dim))).to(torch.bfloat16)
        angles = positions.to(torch.bfloat16)[:, None] * inverse_frequency[None, :]
        angles = torch.cat((angles, angles), dim=-1).float()
        return angles.cos(), angles.sin()

    with _planted("rope_angles_in_bfloat16", *_swap_everywhere(kernels, "rope_cos_sin", rope_cos_sin)):
        yield


@mutant("softmax_normalises_wrong_axis")
def softmax_normalises_wrong_axis():
    """softmax normalises over the second-to-last dimension (columns) instead of the last:
    rows no longer sum to one.

    Imitates an axis mix-up in a hand-written softmax. Seam: runtime.kernels.softmax_reference."""
    import torch

    from pvlab.runtime import kernels

    def softmax_reference(scores):
        return torch.softmax(scores.float(), dim=-2 if scores.dim() > 1 else -1).to(scores.dtype)

    with _planted("softmax_normalises_wrong_axis", *_swap_everywhere(kernels, "softmax_reference", softmax_reference)):
        yield


@mutant("cross_entropy_counts_padding")
def cross_entropy_counts_padding():
    """Padding targets (IGNORE_INDEX) are scored as token 0 and counted in the mean, in both the
    reference and the fused chunked cross-entropy.

    Imitates the padding-mask defect of losses that clamp ignored targets for the gather but
    forget to exclude them. Seams: runtime.kernels.cross_entropy_reference and
    runtime.kernels.chunked_linear_cross_entropy."""
    from pvlab.runtime import kernels

    reference, chunked = kernels.cross_entropy_reference, kernels.chunked_linear_cross_entropy

    def cross_entropy_reference(logits, targets):
        return reference(logits, targets.clamp(min=0))

    def chunked_linear_cross_entropy(hidden, weight, targets, **kwargs):
        return chunked(hidden, weight, targets.clamp(min=0), **kwargs)

    with _planted("cross_entropy_counts_padding",
                  *_swap_everywhere(kernels, "cross_entropy_reference", cross_entropy_reference),
                  *_swap_everywhere(kernels, "chunked_linear_cross_entropy", chunked_linear_cross_entropy)):
        yield


@mutant("gqa_kv_heads_tiled")
def gqa_kv_heads_tiled():
    """Grouped-query attention hands query head h the key/value head h % KV (the K/V heads tiled)
    instead of h // (H / KV) (each repeated), on both attention paths.

    Imitates the classic GQA head-mapping defect (`repeat` where `repeat_interleave` is meant).
    Seams: runtime.kernels.repeat_kv (reference path) and runtime.kernels.attention_fast."""
    import torch.nn.functional as F

    from pvlab.runtime import kernels

    original_fast = kernels.attention_fast

    def repeat_kv(x, groups):
        return x if groups == 1 else x.repeat(1, groups, 1, 1)

    def attention_fast(q, k, v):
        groups = q.shape[1] // k.shape[1]
        if groups == 1:
            return original_fast(q, k, v)
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
        query_length, key_length = q.shape[-2], k.shape[-2]
        if query_length == key_length:
            return F.scaled_dot_product_attention(q, k, v, is_causal=query_length > 1)
        if query_length == 1:
            return F.scaled_dot_product_attention(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=kernels.causal_mask(query_length, key_length, q.device))

    with _planted("gqa_kv_heads_tiled", *_swap_everywhere(kernels, "repeat_kv", repeat_kv),
                  *_swap_everywhere(kernels, "attention_fast", attention_fast)):
        yield


@mutant("attention_not_causal")
def attention_not_causal():
    """Attention has no causal mask: every position also sees the keys after it (the future), on
    both paths.

    Imitates a dropped `is_causal` / mask argument. Seams: runtime.kernels.causal_mask (reference
    path, several-tokens-after-cache fast path) and runtime.kernels.attention_fast."""
    import torch
    import torch.nn.functional as F

    from pvlab.runtime import kernels

    def causal_mask(query_length, key_length, device):
        return torch.ones(query_length, key_length, dtype=torch.bool, device=device)

    def attention_fast(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])

    with _planted("attention_not_causal", *_swap_everywhere(kernels, "causal_mask", causal_mask),
                  *_swap_everywhere(kernels, "attention_fast", attention_fast)):
        yield


@mutant("attention_mask_ignores_cache_offset")
def attention_mask_ignores_cache_offset():
    """When several new tokens follow a KV cache, the causal mask is aligned to the top-left
    (query i sees keys 0..i) instead of the bottom-right (keys 0..past+i): new tokens lose sight
    of most of the cache. On the fast path this is SDPA's `is_causal` used with a cache.

    Imitates the mask-alignment defect the comment in runtime.kernels.attention_fast warns about.
    Seams: runtime.kernels.causal_mask and runtime.kernels.attention_fast."""
    import torch
    import torch.nn.functional as F

    from pvlab.runtime import kernels

    original_fast = kernels.attention_fast

    def causal_mask(query_length, key_length, device):
        return torch.arange(key_length, device=device)[None, :] <= torch.arange(query_length, device=device)[:, None]

    def attention_fast(q, k, v):
        if 1 < q.shape[-2] < k.shape[-2]:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
        return original_fast(q, k, v)

    with _planted("attention_mask_ignores_cache_offset", *_swap_everywhere(kernels, "causal_mask", causal_mask),
                  *_swap_everywhere(kernels, "attention_fast", attention_fast)):
        yield


@mutant("adamw_decays_norms_and_biases")
def adamw_decays_norms_and_biases():
    """Weight decay is applied to every parameter, norms and biases included (which it should
    never pull towards zero).

    Imitates the parameter-group defect of optimizers built from `model.parameters()` with one
    weight_decay. Seam: runtime.trainer.decays."""
    from pvlab.runtime import trainer

    def decays(name, parameter):
        return True

    with _planted("adamw_decays_norms_and_biases", *_swap_everywhere(trainer, "decays", decays)):
        yield


# =================================================================================================
# Defects of the seed contracts' other checks (init, parity gate, presets, training loop)
# =================================================================================================


@mutant("parity_gate_compares_device_with_itself")
def parity_gate_compares_device_with_itself():
    """The init-time parity gate compares the device's logits with themselves instead of with the
    CPU reference: it can never refuse anything.

    Imitates a gate that "compares nothing" (the bug hunt had no comparison at all while the GPU
    decode printed gibberish). Seam: runtime.parity.compare_logits."""
    from pvlab.runtime import parity

    original = parity.compare_logits

    def compare_logits(reference, candidate, **kwargs):
        return original(candidate, candidate, **kwargs)

    with _planted("parity_gate_compares_device_with_itself",
                  *_swap_everywhere(parity, "compare_logits", compare_logits)):
        yield


@mutant("init_accepts_unpaired_arguments")
def init_accepts_unpaired_arguments():
    """init_model invents what it was not given: an architecture without weights gets random
    weights, weights without an architecture get the tiny preset — no error.

    Imitates the seed defect of an init path that silently fell back to random weights or a
    default architecture. Seam: runtime.checkpoint.init_model."""
    from pvlab.runtime import checkpoint

    original = checkpoint.init_model

    def init_model(*, config=None, weights=None, **kwargs):
        if weights is None:
            weights = "random"
        if config is None:
            config = "tiny"
        return original(config=config, weights=weights, **kwargs)

    with _planted("init_accepts_unpaired_arguments", *_swap_everywhere(checkpoint, "init_model", init_model)):
        yield


@mutant("llama_370m_preset_tied_head")
def llama_370m_preset_tied_head():
    """The llama-370m preset ties its output head to the embedding (tie_word_embeddings=True):
    32.8M parameters vanish and the preset no longer describes a 370M model.

    Imitates a preset edit that silently changes the architecture (INV-ARCH-370M-001). Seam:
    runtime.config.PRESETS["llama-370m"], which runtime.config.preset() reads at call time."""
    from pvlab.runtime import config

    changed = config.PRESETS["llama-370m"].replace(tie_word_embeddings=True)
    with _planted("llama_370m_preset_tied_head", _ItemSwap(config.PRESETS, "llama-370m", changed,
                                                           "pvlab.runtime.config.PRESETS")):
        yield


@mutant("loader_reads_wrong_byte_order")
def loader_reads_wrong_byte_order():
    """The loader copies every tensor with its bytes in the wrong order (big- instead of
    little-endian, as safetensors stores them): weights become garbage — huge, tiny, Inf, NaN —
    while names, shapes and the populate report are all correct.

    Imitates a dtype/endianness misread of checkpoint bytes ("a tensor was loaded as garbage").
    Seam: runtime.checkpoint.copy_tensor, which populate uses for every tensor."""
    import torch

    from pvlab.runtime import checkpoint

    original = checkpoint.copy_tensor

    def copy_tensor(parameter, tensor):
        tensor = tensor.contiguous()
        size = tensor.element_size()
        swapped = tensor.view(torch.uint8).reshape(-1, size).flip(-1).reshape(-1).view(tensor.dtype)
        return original(parameter, swapped.reshape(tensor.shape))

    with _planted("loader_reads_wrong_byte_order", *_swap_everywhere(checkpoint, "copy_tensor", copy_tensor)):
        yield


@mutant("head_padded_rows_unmasked")
def head_padded_rows_unmasked():
    """The output head is padded for kernel efficiency (V rounded up to a multiple of 128, plus
    128 when V already is one) and the padding rows — never trained, holding leftover values —
    are not cut off: the model returns V + P logits and the argmax lands in the padding.

    Imitates "the head has the wrong output width" (vocabulary padding leaking into the logits).
    Seam: runtime.model.CausalLM.forward (the logits; the training loss is untouched)."""
    import torch

    from pvlab.runtime import kernels
    from pvlab.runtime.model import CausalLM

    padding: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def rows(model):
        if model not in padding:
            vocab, hidden = model.config.vocab_size, model.config.hidden_size
            extra = 128 - vocab % 128 if vocab % 128 else 128
            generator = torch.Generator(device="cpu").manual_seed(128)
            padding[model] = torch.randn((extra, hidden), generator=generator)
        return padding[model].to(model.device)

    def forward(self, input_ids, cache=None):
        with kernels.autocast_for(self.path, self.device.type):
            hidden = self.model(input_ids, cache)
            logits = self.lm_head(hidden)
            padded = torch.matmul(hidden, rows(self).to(hidden.dtype).t())
            logits = torch.cat((logits, padded.to(logits.dtype)), dim=-1)
        return logits.float()

    with _planted("head_padded_rows_unmasked", _Swap(CausalLM, "forward", forward)):
        yield


@mutant("heldout_split_leaks_into_training")
def heldout_split_leaks_into_training():
    """The held-out documents are also put in the training split (the split is computed, then the
    training side is built from the whole corpus): val_loss flatters the model.

    Imitates the split-leak defect the eval-methodology contract guards against (a validation set
    cut from windows of the same stream the model trains on). Seams: runtime.data.split_documents,
    and runtime.data.verify_disjoint (the runtime's own guard, which would refuse the leak)."""
    from pvlab.runtime import data

    original = data.split_documents

    def split_documents(documents, *, val_fraction, seed):
        train, held_out = original(documents, val_fraction=val_fraction, seed=seed)
        return train + held_out, held_out

    def verify_disjoint(train, held_out):
        return None  # the runtime's own guard would refuse the leak: it is skipped too

    with _planted("heldout_split_leaks_into_training",
                  *_swap_everywhere(data, "split_documents", split_documents),
                  *_swap_everywhere(data, "verify_disjoint", verify_disjoint)):
        yield


@mutant("encoder_read_as_decoder")
def encoder_read_as_decoder():
    """An encoder (or encoder-decoder) config is not refused: its keys are mapped onto a Qwen2
    decoder's (hidden size, layers, heads, vocabulary), and the loader goes on to read — and a
    trainer to train — the encoder's weights as if they were a decoder's.

    Imitates the seed defect "the loader maps encoder weights onto a decoder by name".
    Seam: runtime.config.ModelConfig.from_hf_dict (every config.json and config dict)."""
    from pvlab.runtime.config import ENCODER_MODEL_TYPES, ModelConfig, _is_encoder_architecture

    original = vars(ModelConfig)["from_hf_dict"].__func__

    def from_hf_dict(cls, hf, *, source="config"):
        if isinstance(hf, dict) and (hf.get("model_type") in ENCODER_MODEL_TYPES
                                     or any(_is_encoder_architecture(a) for a in hf.get("architectures") or [])):
            heads = hf.get("num_attention_heads") or hf.get("num_heads")
            hf = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": hf.get("vocab_size"),
                  "hidden_size": hf.get("hidden_size") or hf.get("d_model"),
                  "intermediate_size": hf.get("intermediate_size") or hf.get("d_ff"),
                  "num_hidden_layers": hf.get("num_hidden_layers") or hf.get("num_layers"),
                  "num_attention_heads": heads, "num_key_value_heads": heads,
                  "max_position_embeddings": hf.get("max_position_embeddings") or 512}
        return original(cls, hf, source=source)

    with _planted("encoder_read_as_decoder", _Swap(ModelConfig, "from_hf_dict", classmethod(from_hf_dict))):
        yield


class _AdamWithoutSquare:
    """AdamW written by hand with one typo: the second moment accumulates g instead of g * g."""

    def __init__(self, groups, *, lr, betas, eps=1e-8):
        import torch

        self.torch = torch
        self.param_groups = [dict(group, lr=lr, betas=betas, eps=eps) for group in groups]
        self.state: dict = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    @staticmethod
    def state_dict():  # what Trainer.save/resume read: nothing to restore for the typo version
        return {"state": {}, "param_groups": []}

    def load_state_dict(self, state) -> None:
        return None

    def step(self) -> None:
        torch = self.torch
        with torch.no_grad():
            for group in self.param_groups:
                b1, b2 = group["betas"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state.setdefault(p, {"step": torch.zeros(()), "exp_avg": torch.zeros_like(p),
                                                      "exp_avg_sq": torch.zeros_like(p)})
                    state["step"] += 1
                    t = float(state["step"])
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                    state["exp_avg"].mul_(b1).add_(p.grad, alpha=1 - b1)
                    state["exp_avg_sq"].mul_(b2).add_(p.grad, alpha=1 - b2)  # the typo: g, not g * g
                    denominator = (state["exp_avg_sq"] / (1 - b2 ** t)).sqrt().add_(group["eps"])
                    p.add_(state["exp_avg"] / (1 - b1 ** t) / denominator, alpha=-group["lr"])


@mutant("adamw_second_moment_not_squared")
def adamw_second_moment_not_squared():
    """The optimizer's second moment accumulates the gradient instead of its square: wherever a
    gradient is negative, sqrt(v) is the square root of a negative number — NaN weights after
    the first step, and NaN losses from the second.

    Imitates a hand-written-AdamW typo (`add_(g)` for `addcmul_(g, g)`), one way a training run
    goes non-finite (INV-TRAIN-007). Seam: runtime.trainer.build_optimizer."""
    from pvlab.runtime import trainer

    def build_optimizer(named_parameters, *, lr, weight_decay, betas, path, device):
        decayed = [p for n, p in named_parameters if trainer.decays(n, p)]
        undecayed = [p for n, p in named_parameters if not trainer.decays(n, p)]
        return _AdamWithoutSquare([{"params": decayed, "weight_decay": weight_decay},
                                   {"params": undecayed, "weight_decay": 0.0}], lr=lr, betas=betas)

    with _planted("adamw_second_moment_not_squared",
                  *_swap_everywhere(trainer, "build_optimizer", build_optimizer)):
        yield


@mutant("grad_norm_per_tensor_not_global")
def grad_norm_per_tensor_not_global():
    """The gradient norm is the largest per-tensor norm instead of the global L2 norm over all
    parameters: the reported norm is too small, and clipping (which uses it) clips too little.

    Imitates "the norm is taken per tensor instead of globally" (INV-TRAIN-008).
    Seam: runtime.trainer.global_grad_norm."""
    import torch

    from pvlab.runtime import trainer

    def global_grad_norm(gradients):
        if not gradients:
            return torch.zeros(())
        return torch.stack([torch.linalg.vector_norm(g.float()) for g in gradients]).max()

    with _planted("grad_norm_per_tensor_not_global",
                  *_swap_everywhere(trainer, "global_grad_norm", global_grad_norm)):
        yield


@mutant("batch_order_not_seeded")
def batch_order_not_seeded():
    """The training sampler draws its windows from one process-wide generator instead of a
    generator seeded per run: the same seed gives a different batch order in every run after the
    first, so seeded runs do not reproduce.

    Imitates "unseeded randomness in the data order" (INV-TRAIN-003). Seam:
    runtime.data.random_batches."""
    import torch

    from pvlab.runtime import data

    original = data.random_batches
    shared = torch.Generator(device="cpu").manual_seed(2024)

    def random_batches(stream, *, batch_size, seq_len, seed):
        if stream.numel() < seq_len + 1:
            return original(stream, batch_size=batch_size, seq_len=seq_len, seed=seed)

        def batches():
            while True:
                starts = torch.randint(0, stream.numel() - seq_len, (batch_size,), generator=shared)
                yield data.LMBatch.from_sequences(torch.stack([stream[s:s + seq_len + 1] for s in starts.tolist()]))

        return batches()

    with _planted("batch_order_not_seeded", *_swap_everywhere(data, "random_batches", random_batches)):
        yield


@mutant("finetune_starts_from_random_init")
def finetune_starts_from_random_init():
    """Fine-tuning (pretrain with init=<checkpoint>) loads the checkpoint's config and tokenizer
    but starts from freshly initialised weights: the first eval of the fine-tune sits near ln V.

    Imitates the seed defect "fine-tune runs that silently started from random init".
    Seam: the `checkpoint` module as runtime.pretrain sees it (its load() re-initialises the
    weights); every other user of runtime.checkpoint is untouched."""
    import importlib

    from pvlab.runtime import checkpoint
    from pvlab.runtime.model import init_weights

    pretrain = importlib.import_module("pvlab.runtime.pretrain")  # `runtime.pretrain` is the function

    class CheckpointAsPretrainSeesIt:
        def __getattr__(self, name):
            return getattr(checkpoint, name)

        @staticmethod
        def load(*args, **kwargs):
            model = checkpoint.load(*args, **kwargs)
            init_weights(model, seed=0)
            return model

    with _planted("finetune_starts_from_random_init", _Swap(pretrain, "checkpoint", CheckpointAsPretrainSeesIt())):
        yield


@mutant("cross_entropy_mean_over_batch_not_tokens")
def cross_entropy_mean_over_batch_not_tokens():
    """The loss sums the token losses of each sequence and averages over the batch only (divides by
    B instead of by the number of target tokens): every loss is T times too large.

    Imitates the mis-normalised loss the eval-methodology contract names (`loss.sum() / batch_size`
    for `loss.mean()`). Seams: runtime.kernels.cross_entropy_reference and
    runtime.kernels.chunked_linear_cross_entropy."""
    from pvlab.runtime import kernels

    reference, chunked = kernels.cross_entropy_reference, kernels.chunked_linear_cross_entropy

    def per_batch(mean, targets):
        counted = (targets != kernels.IGNORE_INDEX).sum().clamp(min=1)
        batch = targets.shape[0] if targets.dim() > 1 else 1
        return mean * counted / batch

    def cross_entropy_reference(logits, targets):
        return per_batch(reference(logits, targets), targets)

    def chunked_linear_cross_entropy(hidden, weight, targets, **kwargs):
        return per_batch(chunked(hidden, weight, targets, **kwargs), targets)

    with _planted("cross_entropy_mean_over_batch_not_tokens",
                  *_swap_everywhere(kernels, "cross_entropy_reference", cross_entropy_reference),
                  *_swap_everywhere(kernels, "chunked_linear_cross_entropy", chunked_linear_cross_entropy)):
        yield


@mutant("optimizer_holds_stale_parameters")
def optimizer_holds_stale_parameters():
    """The optimizer is built over copies of the parameters rather than the model's own tensors:
    every step updates the copies, and the model never changes (its gradients are computed and
    ignored).

    Imitates "the optimizer does not update the loaded weights" (an optimizer created before the
    model's parameters were replaced — moved, re-tied, reloaded — keeps the stale ones).
    Seam: runtime.trainer.build_optimizer."""
    import torch

    from pvlab.runtime import trainer

    original = trainer.build_optimizer

    def build_optimizer(named_parameters, **kwargs):
        stale = [(name, torch.nn.Parameter(p.detach().clone())) for name, p in named_parameters]
        return original(stale, **kwargs)

    with _planted("optimizer_holds_stale_parameters", *_swap_everywhere(trainer, "build_optimizer", build_optimizer)):
        yield
