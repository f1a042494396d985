"""The checks that pv contracts bind to (`check: falsifiers.<module>:<function>`).

A check is a plain function `name(*, device, **params) -> dict[str, float | int | bool]`: it
drives the runtime, measures, and returns named observations. It never judges them — the
contract's `prediction` does — and it raises only when it cannot measure (ERROR), or
`pv.harness.DeviceUnavailable` when the device it needs is absent (SKIP).

Modules, by what they observe:

    forward            logits sanity and populate coverage of a trained checkpoint
    evaluation         eval-loss bands/bounds, train->eval pollution, labels, split, train/val ratio
    bias               Q/K/V bias presence on the device and bias effect on attention
    parity             logits / greedy-decode parity between backends, the init parity gate, --no-gpu
    init               refusal of unpaired arguments and encoder architectures
    training           parameter count, finite loss, grad norm, optimizer digest, resume, fine-tune
    kernel_*           one numerical kernel of runtime.kernels against an independent reference
    fixtures           cached (per process) checkpoints, models and batches
"""
