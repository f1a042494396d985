"""One AdamW update of many tensors in one kernel, with the gradient clip folded in and, for bf16
weights, fp32 master weights beside them (the update behind master_weights.MasterAdamW).

For every tensor i of a set, with g the gradient read in its own dtype and scaled by the clip
factor s (a 0-dim device tensor), p the fp32 value (the master for a bf16 weight, the parameter
itself for an fp32 one), and m, v its fp32 moments:

    g  = float(grad) * s
    p  = p - lr * wd_i * p                                     (decoupled weight decay)
    m  = beta1 * m + (1 - beta1) * g
    v  = beta2 * v + (1 - beta2) * g * g
    p  = p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)       bc_k = 1 - beta_k ** step
    weight = bf16(p)                                            (bf16 weights only: round to nearest even)

the order and the arithmetic of torch's fused AdamW (aten's fused_adam_utils: decay first, the
bias corrections in float64, the rest in fp32), so one step of a master weight is the step torch
would take on the fp32 parameter that autocast rounds to the same bf16 weight. Nothing changes
when `skip` (a 0-dim device tensor) is non-zero: the step count, the moments, the masters and the
weights are left as they were (torch's found_inf).

Every scalar the update reads (learning rate, step count, clip factor, skip) is a device tensor,
so the update can be captured in a CUDA graph and replayed with new values.

Two implementations of the same arithmetic:
* `update_reference`: torch operations per tensor; any device (the CPU's path);
* `update_triton`: one Triton kernel over every tensor of a set (CUDA). The tensors are reached
  through tables of their addresses, so the weights and gradients stay the separate tensors
  autograd and the model own (no copy into a flat buffer), and the moments and masters are flat
  fp32 buffers. Per element it reads the gradient (2 bytes for bf16), the master and both moments
  (12) and writes them and the bf16 weight (14): the 28 bytes torch's fused AdamW moves for an
  fp32 parameter, with the clip's extra pass over every gradient gone.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import torch

# Elements per Triton program: 2,048 (8 KiB of fp32 state a buffer), so the last block of a
# small tensor (a norm's 896 elements) wastes little.
BLOCK = 2048
# Each tensor's state starts at a multiple of this many elements of the flat buffers (256 bytes of
# fp32), and every weight and gradient address is a multiple of 16 bytes (checked): the kernel
# tells Triton so, and, where every tensor's size is a multiple of 16 elements (every matrix and
# vector of the Qwen2 and Llama shapes), that the bounds mask is constant over 16 elements. With
# both it can move 16 bytes per load and store. Without any hint an H100 ran the update at
# 1.6 TB/s (8.8 ms a step at qwen2-0.5b shape), against 2.6 TB/s for torch's fused AdamW
# (docs/performance.md).
STATE_ALIGNMENT = 64
ADDRESS_ALIGNMENT = 16


def state_layout(numels: Sequence[int]) -> tuple[list[int], int]:
    """(offset of each tensor's state in the flat buffers, their total length): in order, each
    offset a multiple of STATE_ALIGNMENT."""
    offsets, total = [], 0
    for numel in numels:
        offsets.append(total)
        total += -(-numel // STATE_ALIGNMENT) * STATE_ALIGNMENT
    return offsets, total


@dataclass
class UpdateScalars:
    """The device tensors one update reads: lr (fp32), step (fp32, the count *after* this step),
    clip (fp32 factor applied to every gradient), skip (fp32, non-zero: change nothing); and the
    constants beta1, beta2, eps."""
    lr: torch.Tensor
    step: torch.Tensor
    clip: torch.Tensor
    skip: torch.Tensor
    beta1: float
    beta2: float
    eps: float

    def corrections(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(lr / bc1, sqrt(bc2)) as 0-dim float64 device tensors, as torch's fused AdamW computes them."""
        step = self.step.double()
        # A Python base, not a tensor made from one: nothing is copied from the host (a CUDA graph
        # cannot capture such a copy).
        bias_correction1 = 1 - torch.pow(self.beta1, step)
        bias_correction2 = 1 - torch.pow(self.beta2, step)
        return self.lr.double() / bias_correction1, bias_correction2.sqrt()


@torch.no_grad()
def update_reference(weights: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                     masters: Sequence[torch.Tensor] | None, exp_avgs: Sequence[torch.Tensor],
                     exp_avg_sqs: Sequence[torch.Tensor], decays: Sequence[float], scalars: UpdateScalars) -> None:
    """The update of the module docstring with torch operations, one tensor at a time. `masters`
    None: the weights are fp32 and updated in place; else each weight is bf16(master) after."""
    step_size, bias_correction2_sqrt = (t.float() for t in scalars.corrections())
    keep = (scalars.skip == 0).float()          # 1: apply the step; 0: leave everything as it was
    lr = scalars.lr.float()
    for index, (weight, grad) in enumerate(zip(weights, grads)):
        value = weight if masters is None else masters[index]
        exp_avg, exp_avg_sq = exp_avgs[index], exp_avg_sqs[index]
        g = grad.float() * scalars.clip
        new_value = value - lr * decays[index] * value
        new_m = scalars.beta1 * exp_avg + (1 - scalars.beta1) * g
        new_v = scalars.beta2 * exp_avg_sq + (1 - scalars.beta2) * g * g
        denom = new_v.sqrt() / bias_correction2_sqrt + scalars.eps
        new_value = new_value - step_size * new_m / denom
        # torch.where, not a multiply by keep: a non-finite gradient must not leak into a skipped step.
        value.copy_(torch.where(keep.bool(), new_value, value))
        exp_avg.copy_(torch.where(keep.bool(), new_m, exp_avg))
        exp_avg_sq.copy_(torch.where(keep.bool(), new_v, exp_avg_sq))
        if masters is not None:
            weight.copy_(value.to(weight.dtype))


# ---- the Triton kernel ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _kernel():
    """The Triton kernel, defined on first use (Triton is imported only on a GPU path)."""
    import triton
    import triton.language as tl

    @triton.jit
    def adamw_tables(weight_table, grad_table, block_tensor, block_start, numels, state_offsets, decays,
                     masters, exp_avgs, exp_avg_sqs, lr_ptr, step_size_ptr, bc2_sqrt_ptr, clip_ptr, skip_ptr,
                     beta1, beta2, eps, WEIGHT_DTYPE: tl.constexpr, HAS_MASTER: tl.constexpr,
                     BLOCK: tl.constexpr, STATE_ALIGNMENT: tl.constexpr, ALIGNMENT: tl.constexpr,
                     SIZES_ALIGNED: tl.constexpr):
        program = tl.program_id(0)
        tensor = tl.load(block_tensor + program)
        start = tl.multiple_of(tl.load(block_start + program).to(tl.int64), BLOCK)
        numel = tl.load(numels + tensor)
        if SIZES_ALIGNED:   # every size a multiple of ALIGNMENT elements: the bounds mask is constant per vector
            numel = tl.multiple_of(numel, ALIGNMENT)
        base = tl.multiple_of(tl.load(state_offsets + tensor), STATE_ALIGNMENT)
        decay = tl.load(decays + tensor)
        offsets = start + tl.arange(0, BLOCK)
        mask = (offsets < numel) & (tl.load(skip_ptr) == 0)
        weight_ptr = tl.multiple_of(tl.load(weight_table + tensor).to(tl.pointer_type(WEIGHT_DTYPE)), ALIGNMENT)
        grad_ptr = tl.multiple_of(tl.load(grad_table + tensor).to(tl.pointer_type(WEIGHT_DTYPE)), ALIGNMENT)
        lr = tl.load(lr_ptr)
        step_size = tl.load(step_size_ptr).to(tl.float32)
        bc2_sqrt = tl.load(bc2_sqrt_ptr).to(tl.float32)
        g = tl.load(grad_ptr + offsets, mask=mask, other=0.0).to(tl.float32) * tl.load(clip_ptr)
        if HAS_MASTER:
            value = tl.load(masters + base + offsets, mask=mask, other=0.0)
        else:
            value = tl.load(weight_ptr + offsets, mask=mask, other=0.0)
        m = tl.load(exp_avgs + base + offsets, mask=mask, other=0.0)
        v = tl.load(exp_avg_sqs + base + offsets, mask=mask, other=0.0)
        value = value - lr * decay * value
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        value = value - step_size * m / (tl.sqrt(v) / bc2_sqrt + eps)
        tl.store(exp_avgs + base + offsets, m, mask=mask)
        tl.store(exp_avg_sqs + base + offsets, v, mask=mask)
        if HAS_MASTER:
            tl.store(masters + base + offsets, value, mask=mask)
            tl.store(weight_ptr + offsets, value.to(WEIGHT_DTYPE), mask=mask)
        else:
            tl.store(weight_ptr + offsets, value, mask=mask)

    return adamw_tables


class TensorSet:
    """The static part of a Triton update over `weights` (one dtype): per-block tables (which
    tensor, where in it), each tensor's size, offset in the flat state buffers and decay, and the
    weights' address table. The gradients' address table is built per set of gradient buffers
    (`grad_table`): a captured step's gradients stay put, a plain step's are new each time."""

    def __init__(self, weights: Sequence[torch.Tensor], decays: Sequence[float], device: torch.device):
        numels = [w.numel() for w in weights]
        blocks = [(index, start) for index, n in enumerate(numels) for start in range(0, n, BLOCK)]
        offsets, _ = state_layout(numels)
        self.dtype = weights[0].dtype
        if any(w.dtype != self.dtype or not w.is_contiguous() for w in weights):
            raise ValueError("a TensorSet holds contiguous tensors of one dtype")
        _check_aligned(weights, "weight")
        self.block_tensor = torch.tensor([b[0] for b in blocks], dtype=torch.int32, device=device)
        self.block_start = torch.tensor([b[1] for b in blocks], dtype=torch.int64, device=device)
        self.numels = torch.tensor(numels, dtype=torch.int64, device=device)
        self.state_offsets = torch.tensor(offsets, dtype=torch.int64, device=device)
        self.decays = torch.tensor(list(decays), dtype=torch.float32, device=device)
        self.weight_table = torch.tensor([w.data_ptr() for w in weights], dtype=torch.int64, device=device)
        self.num_blocks = len(blocks)
        self.sizes_aligned = all(n % ADDRESS_ALIGNMENT == 0 for n in numels)
        self._grad_tables: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    def grad_table(self, grads: Sequence[torch.Tensor]) -> torch.Tensor:
        """The device table of the gradients' addresses. Inside a CUDA-graph capture it is copied
        from pinned host memory without waiting: the copy is part of the graph and re-reads the
        pinned table at each replay, so both are kept for as long as this set lives."""
        key = tuple(g.data_ptr() for g in grads)
        if key in self._grad_tables:
            return self._grad_tables[key][1]
        if not torch.cuda.is_current_stream_capturing():
            return torch.tensor(key, dtype=torch.int64, device=self.weight_table.device)   # a plain step's own
        host = torch.tensor(key, dtype=torch.int64).pin_memory()
        self._grad_tables[key] = (host, host.to(self.weight_table.device, non_blocking=True))
        return self._grad_tables[key][1]


@torch.no_grad()
def update_triton(tensors: TensorSet, grads: Sequence[torch.Tensor], masters: torch.Tensor | None,
                  exp_avgs: torch.Tensor, exp_avg_sqs: torch.Tensor, scalars: UpdateScalars) -> None:
    """The update of the module docstring as one Triton launch over `tensors` (flat fp32 masters
    (None for fp32 weights, updated in place), moments laid out as `tensors.state_offsets` say)."""
    import triton.language as tl

    if any(g.dtype != tensors.dtype or not g.is_contiguous() for g in grads):
        raise ValueError("every gradient must be contiguous and of its weight's dtype")
    _check_aligned(grads, "gradient")
    step_size, bias_correction2_sqrt = scalars.corrections()
    weight_dtype = {torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}[tensors.dtype]
    _kernel()[(tensors.num_blocks,)](
        tensors.weight_table, tensors.grad_table(grads), tensors.block_tensor, tensors.block_start, tensors.numels,
        tensors.state_offsets, tensors.decays, exp_avgs if masters is None else masters, exp_avgs, exp_avg_sqs,
        scalars.lr, step_size, bias_correction2_sqrt, scalars.clip, scalars.skip,
        scalars.beta1, scalars.beta2, scalars.eps,
        WEIGHT_DTYPE=weight_dtype, HAS_MASTER=masters is not None, BLOCK=BLOCK, STATE_ALIGNMENT=STATE_ALIGNMENT,
        ALIGNMENT=ADDRESS_ALIGNMENT, SIZES_ALIGNED=tensors.sizes_aligned, num_warps=4)


def _check_aligned(tensors: Sequence[torch.Tensor], what: str) -> None:
    """The kernel is told every address is a multiple of ADDRESS_ALIGNMENT bytes; a tensor that is
    not (a view at an odd offset) is refused, never read with a wrong vector width."""
    for tensor in tensors:
        if tensor.data_ptr() % ADDRESS_ALIGNMENT:
            raise ValueError(f"a {what} of shape {tuple(tensor.shape)} starts at an address that is not a multiple "
                             f"of {ADDRESS_ALIGNMENT} bytes; the fused update needs aligned tensors")
