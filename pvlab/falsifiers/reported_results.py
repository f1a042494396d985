"""What a pretraining run reports is what it saved, on and off the evaluation cadence.

runtime.pretrain.pretrain writes a checkpoint and, in its runtime.json, the figures a reader
takes for that checkpoint's: the final train_loss / val_loss (history[-1]), the step count, the
tokens trained, the parameter count. docs/runtime.md: pretrain "records train and held-out loss
at every eval in runtime.json", and train_steps evaluates "before the first, every eval_every
steps and after the last". FALSIFY-RUNTIME-ENTRYPOINTS-001 holds one run with steps a multiple of
eval_every to its checkpoint; on that cadence the last scheduled eval *is* the final model, so a
loop that forgets the off-cadence final eval (or evaluates one step early) passes it. This check
runs several tiny recipes whose steps are and are not multiples of eval_every (eval_every larger
than steps included, one on the packed path with micro-batches) and recomputes every figure it
can from the SAVED checkpoint:

- the final train and held-out losses in float64 from the written model's logits on the recipe's
  own eval windows (entrypoints._recomputed_losses: log-sum-exp minus the target logit over every
  real target; independent of Trainer.evaluate and the runtime's cross-entropies), compared with
  runtime.json's train_loss / val_loss, its history[-1] and what pretrain returned;
- the steps run from the saved trainer state (trainer.json's step, the Trainer's own counter),
  against runtime.json's steps and its last history step, and the evaluation schedule the
  documented rule implies ({0, every eval_every-th step, the last});
- the tokens trained as steps run x batch x seq_len, the parameter count summed over the tensor
  shapes in model.safetensors (independent of runtime.config).
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from ._util import rtol_atol
from .entrypoints import _pretrain_module, _recomputed_losses, _rel, _small_recipe

# (steps, eval_every, extra recipe fields): two off the cadence (5 at 2; 7 at 3 packed, with
# micro-batches), one on it (4 at 2), one with eval_every larger than steps (3 at 7)
CONFIGURATIONS = (
    (5, 2, {}),
    (4, 2, {}),
    (3, 7, {}),
    (7, 3, {"pack_documents": True, "micro_batch_size": 2}),
)


def _safetensors_parameters(path: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())


def reported_results_match_checkpoint(*, device: str, num_documents: int = 60,
                                      tolerance: dict | None = None) -> dict:
    """runtime.pretrain.pretrain for every configuration of CONFIGURATIONS (entrypoints' tiny recipe: 4 x
    32-token windows, 2 eval batches, `num_documents` synthetic documents) into a
    temporary directory, each reported figure then recomputed from the checkpoint written.

    Observations: configurations, off_cadence (configurations whose steps are not a multiple of
    eval_every), completed (runs that returned and wrote a checkpoint); worst_rel_diff (the
    largest relative disagreement, over configurations, between a reported final loss —
    runtime.json's train_loss, val_loss, history[-1]'s, and pretrain's returned ones — and the
    float64 recomputation from the saved model), rtol; final_step_mismatches (configurations
    whose runtime.json steps or last history step is not the saved trainer's step, or whose
    trainer step is not the recipe's steps), schedule_wrong (history steps not {0, k·eval_every,
    steps}), tokens_wrong (trained_tokens not steps run x batch x seq_len), parameters_wrong
    (parameters not the safetensors tensors' element count), returned_differs (pretrain's
    returned results not runtime.json's); worst_config (the configuration of worst_rel_diff, as
    "steps/eval_every"), first_failure (a crash)."""
    rtol, _ = rtol_atol(tolerance, "float32")
    pretrain = _pretrain_module()
    completed = final_step_mismatches = schedule_wrong = tokens_wrong = parameters_wrong = returned_differs = 0
    worst, worst_config, first_failure = 0.0, "", ""
    for steps, eval_every, extra in CONFIGURATIONS:
        recipe = _small_recipe(steps=steps, eval_every=eval_every, num_documents=num_documents, **extra)
        with tempfile.TemporaryDirectory(prefix="pv-reported-") as tmp:
            out = Path(tmp) / "out"
            try:
                returned = pretrain.pretrain(recipe, out, device="cpu", path="reference", progress=False)
                written = json.loads((out / "runtime.json").read_text(encoding="utf-8"))["results"]
                steps_run = int(json.loads((out / "trainer.json").read_text(encoding="utf-8"))["step"])
                oracle = _recomputed_losses(out, recipe)
                parameters = _safetensors_parameters(out / "model.safetensors")
            except Exception as error:  # noqa: BLE001 - a valid recipe that crashes is the finding
                first_failure = first_failure or f"{steps}/{eval_every}: {type(error).__name__}: {str(error)[:200]}"
                worst = math.inf
                continue
        completed += 1
        history = written.get("history") or [{}]
        reported = [("train_loss", written.get("train_loss")), ("val_loss", written.get("val_loss")),
                    ("train_loss", history[-1].get("train_loss")), ("val_loss", history[-1].get("val_loss")),
                    ("train_loss", returned.get("train_loss")), ("val_loss", returned.get("val_loss"))]
        diff = max(_rel(value, oracle[name]) for name, value in reported)
        if not diff <= worst:   # NaN and inf count as the worst
            worst, worst_config = diff, f"{steps}/{eval_every}"
        final_step_mismatches += int(written.get("steps") != steps_run or history[-1].get("step") != steps_run
                                     or steps_run != steps)
        schedule = sorted({0, *range(eval_every, steps + 1, eval_every), steps})
        schedule_wrong += int([record.get("step") for record in history] != schedule)
        tokens_wrong += int(written.get("trained_tokens") != steps_run * recipe.batch_size * recipe.seq_len)
        parameters_wrong += int(written.get("parameters") != parameters)
        comparable = {key: value for key, value in returned.items() if key != "phase_seconds"}
        returned_differs += int(comparable != {key: value for key, value in written.items() if key != "phase_seconds"})
    return {"configurations": len(CONFIGURATIONS),
            "off_cadence": sum(1 for steps, every, _ in CONFIGURATIONS if steps % every),
            "completed": completed, "worst_rel_diff": worst, "rtol": rtol, "worst_config": worst_config,
            "final_step_mismatches": final_step_mismatches, "schedule_wrong": schedule_wrong,
            "tokens_wrong": tokens_wrong, "parameters_wrong": parameters_wrong,
            "returned_differs": returned_differs, "first_failure": first_failure}
