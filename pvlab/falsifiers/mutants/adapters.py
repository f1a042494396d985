"""Planted bugs at the seams of the falsifier pack's transformers adapter
(pvpack.adapters.transformers): the seeds' defects written against a third-party stack, so the
same pack falsifiers that kill them in pvlab's runtime are shown to kill them there too.

Each swaps one attribute of the adapter module or its model class (the adapter calls them at
call time: `token_loss`, `schedule`, `TransformersModel.evaluate`, `TransformersAdapter.load`).

Where each is planted (`runtimes=`, decided seam by seam, never from the name): the Liger adapter
(pvpack.adapters.liger) subclasses this one — LigerAdapter.load calls TransformersAdapter.load,
LigerModel inherits evaluate, logits, generate, learning_rate and __init__, and its eval goes
through `token_loss` — so a bug at those seams is planted in `liger` too. LigerModel overrides
train_step (Liger's fused loss), so a bug in TransformersModel.train_step is not. pvlab's
runtime never imports this adapter: none of these is planted there. (Every other module of this
package plants bugs in pvlab's runtime, the project's default runtime, the default of
`@mutant`.)"""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap

HF = ("transformers", "liger")  # the transformers adapter's seams, inherited by the Liger adapter


def _loaded_from_file(kwargs) -> bool:
    from pvpack.protocol import TRAINED

    return kwargs.get("init", TRAINED) == TRAINED


@mutant("hf_fast_path_drops_qkv_bias", runtimes=HF)
def hf_fast_path_drops_qkv_bias():
    """The transformers adapter's fast path loads the model without its Q/K/V projection biases
    (each q/k/v_proj.bias removed from the modules); the reference path keeps them.

    Imitates the seed defect (a CUDA forward dropping Qwen's Q/K/V biases) on transformers.
    Seam: pvpack.adapters.transformers.TransformersAdapter.load (fast path only)."""
    from pvpack.adapters import transformers as adapter
    from pvpack.protocol import FAST

    original = adapter.TransformersAdapter.load

    def load(self, checkpoint, *, device, path="reference", **kwargs):
        model = original(self, checkpoint, device=device, path=path, **kwargs)
        if path == FAST:
            for name, module in model.model.named_modules():
                if name.endswith(("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")):
                    module.bias = None
        return model

    with plant("hf_fast_path_drops_qkv_bias", swap(adapter.TransformersAdapter, "load", load)):
        yield


@mutant("hf_evaluate_averages_batch_means", runtimes=HF)
def hf_evaluate_averages_batch_means():
    """The transformers adapter's eval loop averages each batch's mean loss: a batch with few
    scored tokens weighs as much as a full one.

    Imitates `sum(losses) / len(losses)` for a token-weighted mean (the pvlab seam's
    evaluate_averages_batch_means). Seam: pvpack.adapters.transformers.TransformersModel.evaluate."""
    import torch

    from pvpack.adapters import transformers as adapter

    def evaluate(self, batches):
        self.model.eval()
        with torch.no_grad():
            losses = [float(adapter.token_loss(self._forward(b.inputs), b.targets.to(self.device))) for b in batches]
        return sum(losses) / len(losses)

    with plant("hf_evaluate_averages_batch_means", swap(adapter.TransformersModel, "evaluate", evaluate)):
        yield


@mutant("hf_warmup_never_warms", runtimes=HF)
def hf_warmup_never_warms():
    """The warmup is written with integer division, lr * (step // warmup_steps): every warmup
    step runs at lr 0, then the schedule jumps to the peak.

    Imitates a warmup that never warms. Seam: pvpack.adapters.transformers.schedule."""
    from pvpack.adapters import transformers as adapter

    original = adapter.schedule

    def schedule(step, settings):
        if settings.warmup_steps and step < settings.warmup_steps:
            return settings.lr * (step // settings.warmup_steps)
        return original(step, settings)

    with plant("hf_warmup_never_warms", swap(adapter, "schedule", schedule)):
        yield


@mutant("hf_fast_path_attention_scale_wrong", runtimes=HF)
def hf_fast_path_attention_scale_wrong():
    """The transformers adapter's fast path scales attention scores by 1/head_dim instead of
    1/sqrt(head_dim) (each attention module's `scaling` set on fast-path models): flatter
    attention than the reference path's.

    Imitates a fast path that diverges from the reference (a fused attention kernel given the
    wrong `scale=`). Seam: pvpack.adapters.transformers.TransformersAdapter.load (fast path only)."""
    from pvpack.adapters import transformers as adapter
    from pvpack.protocol import FAST

    original = adapter.TransformersAdapter.load

    def load(self, checkpoint, *, device, path="reference", **kwargs):
        model = original(self, checkpoint, device=device, path=path, **kwargs)
        if path == FAST:
            for module in model.model.modules():
                if hasattr(module, "scaling") and hasattr(module, "head_dim"):
                    module.scaling = 1.0 / module.head_dim
        return model

    with plant("hf_fast_path_attention_scale_wrong", swap(adapter.TransformersAdapter, "load", load)):
        yield


def _wrap_load(name, after):
    """plant(name, ...) of TransformersAdapter.load followed by `after(model, path, kwargs)`."""
    from pvpack.adapters import transformers as adapter

    original = adapter.TransformersAdapter.load

    def load(self, checkpoint, *, device, path="reference", **kwargs):
        model = original(self, checkpoint, device=device, path=path, **kwargs)
        after(model, path, kwargs)
        return model

    return plant(name, swap(adapter.TransformersAdapter, "load", load))


@mutant("hf_loader_reads_wrong_byte_order", runtimes=HF)
def hf_loader_reads_wrong_byte_order():
    """Every tensor loaded from the checkpoint has its bytes in the wrong order (big- instead of
    little-endian, as safetensors stores them): weights become garbage — huge, tiny, Inf, NaN —
    while names and shapes are right.

    Imitates the pvlab seam's loader_reads_wrong_byte_order ("a tensor was loaded as garbage").
    Seam: pvpack.adapters.transformers.TransformersAdapter.load (every path, weights from a file)."""
    import torch

    def garble(model, path, kwargs):
        if not _loaded_from_file(kwargs):
            return
        seen = set()  # a tied head shares the embedding's storage: swap its bytes once
        with torch.no_grad():
            for tensor in model.model.state_dict().values():
                if tensor.is_floating_point() and tensor.data_ptr() not in seen:
                    seen.add(tensor.data_ptr())
                    swapped = torch.from_numpy(tensor.detach().cpu().numpy().byteswap())
                    tensor.copy_(swapped.to(tensor.device))

    with _wrap_load("hf_loader_reads_wrong_byte_order", garble):
        yield


@mutant("hf_tied_head_uninitialised", runtimes=HF)
def hf_tied_head_uninitialised():
    """A model with tie_word_embeddings gets its own, never-filled output head instead of sharing
    the trained embedding: the head is a fresh zero buffer, so every logit is 0.

    Imitates the seed defect "tied head replaced by an uninitialised one" (pvlab's
    tied_head_uninitialised). Seam: pvpack.adapters.transformers.TransformersAdapter.load."""
    import torch

    def untie(model, path, kwargs):
        net = model.model
        if getattr(net.config, "tie_word_embeddings", False):
            head = net.get_output_embeddings()
            head.weight = torch.nn.Parameter(torch.zeros_like(head.weight))

    with _wrap_load("hf_tied_head_uninitialised", untie):
        yield


@mutant("hf_populate_drops_optional_tensors", runtimes=HF)
def hf_populate_drops_optional_tensors():
    """Loading drops the optional tensors (every linear layer's bias, the Q/K/V biases of a Qwen2
    model) on every path: the model holds no bias, and nothing reports it.

    Imitates the seed defect where populate silently dropped the Q/K/V biases (pvlab's
    populate_drops_optional_tensors). Seam: pvpack.adapters.transformers.TransformersAdapter.load."""
    import torch

    def drop(model, path, kwargs):
        for module in model.model.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias = None

    with _wrap_load("hf_populate_drops_optional_tensors", drop):
        yield


@mutant("hf_final_norm_skipped", runtimes=HF)
def hf_final_norm_skipped():
    """The RMSNorm between the last decoder layer and the output head is skipped: the head sees
    the raw residual stream.

    Imitates the seed defect "final norm skipped" (pvlab's final_norm_skipped). Seam:
    pvpack.adapters.transformers.TransformersAdapter.load (the model's final norm replaced by the
    identity)."""
    import torch

    def skip(model, path, kwargs):
        model.model.model.norm = torch.nn.Identity()

    with _wrap_load("hf_final_norm_skipped", skip):
        yield


@mutant("hf_finetune_starts_from_random_init", runtimes=HF)
def hf_finetune_starts_from_random_init():
    """A model loaded for training from a checkpoint reads its config but starts from freshly
    initialised weights; loading for inference is untouched.

    Imitates the seed defect "fine-tune runs that silently started from random init" (pvlab's
    finetune_starts_from_random_init). Seam: pvpack.adapters.transformers.TransformersAdapter.load."""
    from pvpack.adapters import transformers as adapter
    from pvpack.protocol import RANDOM

    original = adapter.TransformersAdapter.load

    def load(self, checkpoint, *, device, path="reference", **kwargs):
        if kwargs.get("train") is not None and _loaded_from_file(kwargs):
            kwargs = {**kwargs, "init": RANDOM, "seed": 0}
        return original(self, checkpoint, device=device, path=path, **kwargs)

    with plant("hf_finetune_starts_from_random_init", swap(adapter.TransformersAdapter, "load", load)):
        yield


@mutant("hf_optimizer_holds_stale_parameters", runtimes=HF)
def hf_optimizer_holds_stale_parameters():
    """The optimizer is built over copies of the parameters rather than the model's own tensors:
    every step updates the copies and the model never changes.

    Imitates "the optimizer does not update the loaded weights" (pvlab's
    optimizer_holds_stale_parameters). Seam: pvpack.adapters.transformers.TransformersModel.__init__
    (where the AdamW is built; LigerModel's __init__ calls it)."""
    import torch

    from pvpack.adapters import transformers as adapter

    original = adapter.TransformersModel.__init__

    def __init__(self, model, device, train, path="reference"):
        original(self, model, device, train, path)
        if self.optimizer is not None:
            copies = [p.detach().clone().requires_grad_(True) for p in model.parameters() if p.requires_grad]
            self.optimizer = torch.optim.AdamW(copies, lr=train.lr, betas=tuple(train.betas), eps=train.eps,
                                               weight_decay=train.weight_decay)

    with plant("hf_optimizer_holds_stale_parameters", swap(adapter.TransformersModel, "__init__", __init__)):
        yield


@mutant("hf_cross_entropy_off_by_one", runtimes=HF)
def hf_cross_entropy_off_by_one():
    """The loss shifts the (already aligned) targets a second time: the logits at position t are
    scored against the token at t+2.

    Imitates the seed defect "cross-entropy off by one position" (pvlab's cross_entropy_off_by_one).
    Seam: pvpack.adapters.transformers.token_loss (eval, loss and the training step)."""
    import torch

    from pvpack.adapters import transformers as adapter
    from pvpack.protocol import IGNORE_INDEX

    def token_loss(logits, targets):
        logits, targets = logits[:, :-1], targets[:, 1:]
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                                 ignore_index=IGNORE_INDEX, reduction="mean")

    with plant("hf_cross_entropy_off_by_one", swap(adapter, "token_loss", token_loss)):
        yield


@mutant("hf_cross_entropy_mean_over_batch_not_tokens", runtimes=HF)
def hf_cross_entropy_mean_over_batch_not_tokens():
    """The loss sums the token losses and divides by the batch size instead of the number of
    scored tokens: every loss is about T times too large.

    Imitates `loss.sum() / batch_size` for `loss.mean()` (pvlab's
    cross_entropy_mean_over_batch_not_tokens). Seam: pvpack.adapters.transformers.token_loss."""
    import torch

    from pvpack.adapters import transformers as adapter
    from pvpack.protocol import IGNORE_INDEX

    def token_loss(logits, targets):
        summed = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                                   ignore_index=IGNORE_INDEX, reduction="sum")
        return summed / targets.shape[0]

    with plant("hf_cross_entropy_mean_over_batch_not_tokens", swap(adapter, "token_loss", token_loss)):
        yield


@mutant("hf_eval_targets_equal_inputs", runtimes=HF)
def hf_eval_targets_equal_inputs():
    """The eval loop scores each position against the input token itself instead of the next
    token (the targets are not shifted): eval measures copying, not prediction.

    Imitates the seed defect "eval targets equal the inputs" (pvlab's eval_targets_equal_inputs).
    Seam: pvpack.adapters.transformers.TransformersModel.evaluate."""
    import torch

    from pvpack.adapters import transformers as adapter
    from pvpack.protocol import IGNORE_INDEX

    def evaluate(self, batches):
        self.model.eval()
        total, tokens = 0.0, 0
        with torch.no_grad():
            for batch in batches:
                targets = torch.where(batch.targets != IGNORE_INDEX, batch.inputs, batch.targets)
                count = batch.target_tokens
                total += float(adapter.token_loss(self._forward(batch.inputs), targets.to(self.device))) * count
                tokens += count
        return total / tokens

    with plant("hf_eval_targets_equal_inputs", swap(adapter.TransformersModel, "evaluate", evaluate)):
        yield


@mutant("hf_eval_reads_stale_train_buffer", runtimes=("transformers",))
def hf_eval_reads_stale_train_buffer():
    """Eval reads the loss workspace the last training step wrote instead of its own forward:
    after any training step the eval loss is the cross-entropy of training's leftover one-hot
    logits against training's leftover targets — nearly zero, whatever the eval batch. Before the
    first training step eval is correct.

    Imitates the bug hunt's eval that reported val_loss 0.0008 next to train_loss 1.20 (pvlab's
    eval_reads_stale_train_buffer). Seams: pvpack.adapters.transformers.TransformersModel.train_step
    (which leaves the buffer) and .evaluate. Planted in `transformers` only: LigerModel has its
    own train_step, which leaves no buffer."""
    import torch

    from pvpack.adapters import transformers as adapter

    model_class = adapter.TransformersModel
    train_step, evaluate = model_class.train_step, model_class.evaluate

    def stale_train_step(self, batch):
        loss = train_step(self, batch)
        self._pv_stale_targets = batch.targets.clone()
        return loss

    def stale_evaluate(self, batches):
        targets = getattr(self, "_pv_stale_targets", None)
        if targets is None:
            return evaluate(self, batches)
        vocab = self.model.config.vocab_size
        buffer = torch.nn.functional.one_hot(targets.clamp(min=0), vocab).float() * 20.0
        return float(adapter.token_loss(buffer, targets))

    with plant("hf_eval_reads_stale_train_buffer", swap(model_class, "train_step", stale_train_step),
               swap(model_class, "evaluate", stale_evaluate)):
        yield


@mutant("hf_head_padded_rows_unmasked", runtimes=HF)
def hf_head_padded_rows_unmasked():
    """The output head is padded for kernel efficiency (V rounded up to a multiple of 128, plus
    128 when V already is one) and the padding rows — never trained, holding leftover values —
    are not cut off: logits() returns V + P columns and the argmax lands in the padding.

    Imitates "the head has the wrong output width" (pvlab's head_padded_rows_unmasked). Seam:
    pvpack.adapters.transformers.TransformersModel.logits (the training loss is untouched)."""
    import torch

    from pvpack.adapters import transformers as adapter

    def logits(self, inputs):
        self.model.eval()
        with torch.no_grad(), self.precision():
            out = self.model(input_ids=inputs.to(self.device), use_cache=False, output_hidden_states=True)
        hidden = out.hidden_states[-1].float()
        vocab = out.logits.shape[-1]
        extra = 128 - vocab % 128 if vocab % 128 else 128
        generator = torch.Generator(device="cpu").manual_seed(128)
        rows = torch.randn((extra, hidden.shape[-1]), generator=generator).to(hidden.device)
        return torch.cat((out.logits.float(), hidden @ rows.t()), dim=-1)

    with plant("hf_head_padded_rows_unmasked", swap(adapter.TransformersModel, "logits", logits)):
        yield


@mutant("hf_greedy_decode_samples", runtimes=HF)
def hf_greedy_decode_samples():
    """Greedy decoding samples from softmax(logits) instead of taking the argmax (each call seeded
    from a counter: the draws differ from call to call, the run is reproducible).

    Imitates the seed defect "greedy decode samples" (pvlab's greedy_decode_samples). Seam:
    pvpack.adapters.transformers.TransformersModel.generate."""
    import itertools

    import torch

    from pvpack.adapters import transformers as adapter

    calls = itertools.count()

    def generate(self, prompt, max_new_tokens):
        self.model.eval()
        inputs = torch.tensor([list(prompt)], dtype=torch.long, device=self.device)
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.no_grad(), self.precision():
            torch.manual_seed(1000 + next(calls))
            out = self.model.generate(inputs, attention_mask=torch.ones_like(inputs), do_sample=True, top_k=0,
                                      top_p=1.0, temperature=1.0, max_new_tokens=max_new_tokens,
                                      pad_token_id=self.model.config.eos_token_id or 0)
        return out[0, len(prompt):].tolist()

    with plant("hf_greedy_decode_samples", swap(adapter.TransformersModel, "generate", generate)):
        yield


# ---- tenth blind batch (docs/independent-mutants.md, "Tenth batch") ------------------------------


@mutant("hf_schedule_advances_per_micro_batch", runtimes=("transformers",))
def hf_schedule_advances_per_micro_batch():
    """Under gradient accumulation the step counter, which the learning-rate schedule reads,
    advances once per micro-batch instead of once per optimizer step: warmup ends and the cosine
    decays micro_batches times too early. With one micro-batch nothing changes.

    Imitates `scheduler.step()` called inside the accumulation loop. Seam:
    pvpack.adapters.transformers.TransformersModel.train_step (LigerModel has its own)."""
    import math

    from pvpack.adapters import transformers as adapter

    original = adapter.TransformersModel.train_step

    def train_step(self, batch):
        loss = original(self, batch)
        rows = batch.inputs.shape[0]
        size = math.ceil(rows / self.settings.micro_batches)
        self.step += math.ceil(rows / size) - 1                     # the defect: one step per micro-batch
        return loss

    with plant("hf_schedule_advances_per_micro_batch", swap(adapter.TransformersModel, "train_step", train_step)):
        yield


@mutant("hf_random_init_seeded_after_construction", runtimes=HF)
def hf_random_init_seeded_after_construction():
    """A random initialisation (init=RANDOM) seeds torch after building the model instead of
    before: the weights come from whatever state torch's generator was in, so one seed gives a
    different model from call to call (the seed then governs only what comes after).

    Imitates `torch.manual_seed(seed)` placed below `from_config`. Seam:
    pvpack.adapters.transformers.TransformersAdapter.load (LigerAdapter.load calls it)."""
    import torch

    from pvpack.adapters import transformers as adapter
    from pvpack.protocol import RANDOM

    original = adapter.TransformersAdapter.load

    def load(self, checkpoint, *, device, path=adapter.REFERENCE, init=adapter.TRAINED, seed=0, train=None):
        if init != RANDOM:
            return original(self, checkpoint, device=device, path=path, init=init, seed=seed, train=train)
        from transformers import AutoConfig, AutoModelForCausalLM

        if path not in adapter.ATTENTION:
            raise ValueError(f"unknown path {path!r}")
        config = AutoConfig.from_pretrained(str(checkpoint))
        config._attn_implementation = adapter.ATTENTION[path]
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        torch.manual_seed(seed)                                      # the defect: after construction
        target = torch.device(device)
        model.to(target)
        if train is not None:
            torch.manual_seed(train.seed)
        return adapter.TransformersModel(model, target, train, path)

    with plant("hf_random_init_seeded_after_construction", swap(adapter.TransformersAdapter, "load", load)):
        yield


@mutant("hf_fast_path_loss_in_bfloat16", runtimes=HF)
def hf_fast_path_loss_in_bfloat16():
    """The adapter's loss takes the logits in the dtype they come in: on the fast path (bf16
    autocast) the cross-entropy, its reported value and its gradient are computed in bf16. The
    reference path's fp32 logits are untouched.

    Imitates a loss that drops the `.float()` upcast of the logits (transformers' models stopped
    upcasting logits themselves). Seam: pvpack.adapters.transformers.token_loss (Liger's eval
    goes through it)."""
    import torch

    from pvpack.adapters import transformers as adapter

    def token_loss(logits, targets):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),   # the defect
                                                 ignore_index=adapter.IGNORE_INDEX, reduction="mean")

    with plant("hf_fast_path_loss_in_bfloat16", swap(adapter, "token_loss", token_loss)):
        yield


# ---- twelfth blind batch ----
# Written from pvpack/adapters/transformers.py alone, before any kill was measured
# (docs/independent-mutants.md, "Twelfth batch"; probes in tests/falsifiers/twelfth_mutant_probes.py).


@mutant("hf_fast_path_autocasts_to_float16", runtimes=HF)
def hf_fast_path_autocasts_to_float16():
    """The adapter's fast path runs its forward under float16 autocast instead of bfloat16. On the
    CPU and on recent GPUs both run; fp16 has 3 more mantissa bits than bf16 (so the fast path
    even looks closer to the reference) but 5 exponent bits: activations past 65504 overflow to
    inf and small gradients underflow, with no loss scaling anywhere.

    Imitates `torch.float16` written for "half precision". Seam:
    pvpack.adapters.transformers.TransformersModel.precision."""
    import contextlib

    import torch

    from pvpack.adapters import transformers as adapter

    def precision(self):
        if self.path == adapter.FAST:
            return torch.autocast(device_type=self.device.type, dtype=torch.float16)   # the defect
        return contextlib.nullcontext()

    with plant("hf_fast_path_autocasts_to_float16", swap(adapter.TransformersModel, "precision", precision)):
        yield


@mutant("hf_cosine_progress_ignores_warmup", runtimes=HF)
def hf_cosine_progress_ignores_warmup():
    """The adapter's cosine decay measures its progress from step 0 instead of from the end of
    warmup: after warmup the learning rate starts below the peak (it jumps down at the boundary)
    and reaches the floor at total_steps just the same. Without warmup it is right.

    Imitates `progress = step / total_steps`. Seam: pvpack.adapters.transformers.schedule."""
    import math

    from pvpack.adapters import transformers as adapter

    def schedule(step, settings):
        peak, floor = settings.lr, settings.floor_lr
        if settings.warmup_steps and step < settings.warmup_steps:
            return peak * (step + 1) / settings.warmup_steps
        if not settings.total_steps:
            return peak
        if step >= settings.total_steps:
            return floor
        progress = step / settings.total_steps   # the defect: warmup not subtracted
        return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))

    with plant("hf_cosine_progress_ignores_warmup", swap(adapter, "schedule", schedule)):
        yield
