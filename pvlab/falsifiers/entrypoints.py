"""The runtime's entry points, driven end to end at a tiny size: what they report is what they did.

Every other falsifier meets a checkpoint built once and cached (runtime.zoo), so the pipeline
that builds it — runtime.pretrain.pretrain, the `python -m pvlab.runtime` commands, their
torchrun path and `python -m pvlab.runtime.subjects` — ran only while the cache was filled, never
under a check. `pv mutate` found it: a training loop that never stepped the optimizer, a
tokens-per-second figure divided by the wrong factor, a CLI option dropped on its way to the
recipe, a subject built into the default cache whatever cache directory was asked for — all
survived. These checks run each entry point into a temporary directory (never the shared cache)
on a recipe of a few seconds and compare what it reports with oracles written here:

- the held-out and training losses recomputed from the *written* checkpoint's logits in float64
  (log-sum-exp minus the target logit, summed over every real target and divided by their
  count: independent of Trainer.evaluate, the runtime's cross-entropies and the distributed
  trainer's averaging; the windows come from runtime.data, which data-pipeline covers);
- the run's own arithmetic (steps × batch × window tokens, the evaluation steps the schedule
  implies) and the check's own wall clock (no phase can last longer than the whole call);
- the parameter count summed from the safetensors file's tensors (independent of runtime.config);
- the command lines' documented behaviour (an option reaches the recipe, a refusal exits 1 with
  one `error:` line and no traceback, a usage error exits 2).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path

import torch

from ._util import rtol_atol

# An entry point that crashed or wrote nothing: every observation of its check reads as wrong
# (the prediction then FAILs, naming the crash in `first_failure`, instead of missing names).
_WRONG = {"completed": 0, "failed": 1, "failed_commands": 1, "loss_drop": -math.inf, "refusal_wrong": 1}


def _crashed(keys: tuple[str, ...], message: str, rtol: float) -> dict:
    return {**{key: _WRONG.get(key, math.inf) for key in keys}, "first_failure": message, "rtol": rtol}


def _pretrain_module():
    """runtime.pretrain the module (the package re-exports the function under the same name)."""
    import importlib

    return importlib.import_module("pvlab.runtime.pretrain")


def _small_recipe(**fields):
    from pvlab.runtime.pretrain import Recipe

    values = dict(config="tiny", steps=12, batch_size=4, seq_len=32, lr=3e-3, min_lr=3e-4, warmup_steps=2,
                  num_documents=120, eval_every=6, eval_batches=2)
    values.update(fields)
    return Recipe(**values)


def _nll64(model, batches) -> tuple[float, int]:
    """Summed next-token NLL over every real target of `batches`, in float64 from the model's
    logits (the textbook definition), and the number of those targets."""
    from pvlab.runtime.data import IGNORE_INDEX

    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            logits = model(batch.inputs).to(torch.float64)                    # (B, T, V)
            targets = batch.targets
            keep = targets != IGNORE_INDEX
            log_z = torch.logsumexp(logits, dim=-1)
            picked = logits.gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)
            total += float((log_z - picked)[keep].sum())
            count += int(keep.sum())
    return total, count


def _recomputed_losses(checkpoint_dir: Path, recipe) -> dict:
    """val and train loss of a written checkpoint, recomputed in float64 on the recipe's eval
    windows (the held-out split rebuilt with the checkpoint's own tokenizer)."""
    from pvlab.runtime import checkpoint

    pretrain = _pretrain_module()
    model = checkpoint.load(checkpoint_dir, device="cpu", path="reference")
    model.eval()
    prepared = pretrain.prepare_data(recipe, vocab_size=model.config.vocab_size, tokenizer=model.tokenizer)
    val_total, val_count = _nll64(model, prepared.heldout_batches(recipe))
    train_total, train_count = _nll64(model, prepared.train_eval_batches(recipe))
    return {"val_loss": val_total / val_count, "train_loss": train_total / train_count, "val_tokens": val_count,
            "prepared": prepared, "model": model}


def _rel(actual, expected: float) -> float:
    if not isinstance(actual, (int, float)) or not math.isfinite(actual):
        return math.inf
    return abs(actual - expected) / max(abs(expected), 1e-12)


def _size_gate_wrong(pretrain, tmp: Path) -> int:
    """The recipe-size gate: a zero micro-batch size is refused (ConfigError) before any work,
    and the smallest legal window, one token, is accepted (a zero-step run, one eval batch)."""
    from pvlab.runtime.errors import ConfigError

    wrong = 0
    try:
        pretrain.pretrain(_small_recipe(micro_batch_size=0), tmp / "refused", progress=False)
        wrong += 1
    except ConfigError:
        wrong += int((tmp / "refused").exists())
    except Exception:  # noqa: BLE001 - refused later, by another part, as another error: not the gate
        wrong += 1
    try:
        pretrain.pretrain(_small_recipe(steps=0, seq_len=1, eval_batches=1), tmp / "one-token", progress=False)
    except ConfigError:
        wrong += 1
    return wrong


def pretrain_reports_its_own_run(*, device: str, steps: int = 12, eval_every: int = 6, bias_init_std: float = 0.5,
                                 tolerance: dict | None = None) -> dict:
    """runtime.pretrain.pretrain on a tiny recipe (120 synthetic documents, 4 x 32-token windows,
    `steps` steps, evals every `eval_every`, biases drawn from N(0, bias_init_std)) into a
    temporary directory; its returned results are then checked against the written checkpoint
    and the run itself.

    Observations: completed (pretrain returned; a crash is recorded in `error`), loss_drop (the
    step-0 val_loss minus the last), eval_steps_wrong (the history's steps are not {0, every
    eval_every-th, the last}), val_rel_diff / train_rel_diff (the reported final losses against
    the float64 recomputation from the checkpoint), trained_tokens_wrong (not steps x batch x
    seq_len), tps_rel_diff (tokens_per_second x the reported training seconds against the
    trained tokens) and tps_rtol (what the rounding of both allows), phases_outside_wall (a
    phase lasting less than 0 s or longer than the whole call, timed by the check),
    split_overlap (documents on both sides of the split), split_counts_wrong (reported document
    counts against the split's), bias_std (standard deviation of the checkpoint's projection
    biases: drawn from N(0, bias_init_std) and moved little by a few steps)."""
    from safetensors import safe_open

    from pvlab.runtime import data

    pretrain = _pretrain_module()
    rtol, _ = rtol_atol(tolerance, "float32")
    recipe = _small_recipe(steps=steps, eval_every=eval_every, bias_init_std=bias_init_std)
    with tempfile.TemporaryDirectory(prefix="pv-pretrain-") as tmp:
        out = Path(tmp) / "out"
        started = time.monotonic()
        try:
            results = pretrain.pretrain(recipe, out, device="cpu", path="reference", progress=False)
        except Exception as error:  # noqa: BLE001 - a valid recipe that crashes is the finding
            return _crashed(_PRETRAIN_KEYS, f"{type(error).__name__}: {str(error)[:200]}", rtol)
        wall = time.monotonic() - started
        oracle = _recomputed_losses(out, recipe)
        size_gate_wrong = _size_gate_wrong(pretrain, Path(tmp))
        with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
            biases = [handle.get_tensor(name).flatten() for name in handle.keys() if name.endswith(".bias")]
    prepared = oracle["prepared"]
    history = results["history"]
    expected_steps = sorted({0, *range(eval_every, steps + 1, eval_every), steps})
    trained = steps * recipe.batch_size * recipe.seq_len
    phases = results["phase_seconds"]
    training = phases.get("training", 0.0)
    overlap = {data.document_digest(d) for d in prepared.train_documents} & {
        data.document_digest(d) for d in prepared.heldout_documents}
    return {
        "completed": 1, "first_failure": "", "rtol": rtol, "size_gate_wrong": size_gate_wrong,
        "loss_drop": history[0]["val_loss"] - history[-1]["val_loss"],
        "eval_steps_wrong": int([record["step"] for record in history] != expected_steps),
        "val_rel_diff": _rel(results["val_loss"], oracle["val_loss"]),
        "train_rel_diff": _rel(results["train_loss"], oracle["train_loss"]),
        "trained_tokens_wrong": int(results["trained_tokens"] != trained),
        "tps_rel_diff": _rel(results["tokens_per_second"] * training, trained),
        # training is rounded to 0.01 s and tokens_per_second to 0.1: the product can be off by
        # 0.005 s of tokens plus 0.05 tokens per second of training
        "tps_rtol": (0.005 * results["tokens_per_second"] + 0.05 * training) / trained + 1e-6,
        "phases_outside_wall": sum(1 for name, value in phases.items()
                                   if name != "save" and not 0.0 <= value <= wall)
        + int(sum(v for k, v in phases.items() if k != "save") > wall + 0.05)
        + sum(1 for record in history if not 0.0 <= record["seconds"] <= wall),
        "split_overlap": len(overlap),
        "split_counts_wrong": int(results["train_documents"] != len(prepared.train_documents)
                                  or results["heldout_documents"] != len(prepared.heldout_documents)),
        "bias_std": float(torch.cat(biases).std()) if biases else 0.0,
        "biases": len(biases),
    }


_PRETRAIN_KEYS = ("completed", "size_gate_wrong", "loss_drop", "eval_steps_wrong", "val_rel_diff", "train_rel_diff",
                  "trained_tokens_wrong", "tps_rel_diff", "tps_rtol", "phases_outside_wall", "split_overlap",
                  "split_counts_wrong", "bias_std", "biases")
_CLI_KEYS = ("failed_commands", "recipe_mismatches", "wrote_line_wrong", "progress_lines_wrong", "defaults_wrong", "eval_val_rel_diff", "eval_train_rel_diff",
             "eval_vs_pretrain_rel_diff", "eval_tokens_wrong", "corpus_label_wrong", "corpus_val_rel_diff",
             "inspect_lines_wrong", "inspect_json_differs", "no_gpu_refusal_wrong")
_TORCHRUN_KEYS = ("refusal_wrong", "failed", "group_left_open", "wrote_line_wrong", "sharded_step_wrong",
                  "consolidated_step_wrong", "val_rel_diff", "train_rel_diff", "loss_drop", "eval_seconds_outside_wall")


def _python_corpus(directory: Path, function: str, functions: int) -> Path:
    """Three Python modules of `functions` functions each, `function` formatted with the module's
    index and the function's k: a corpus directory for `eval --corpus` whose text the check knows."""
    directory.mkdir()
    for index in range(3):
        text = "".join(function.format(index=index, k=k) for k in range(functions))
        (directory / f"m{index}.py").write_text(text, encoding="utf-8")
    return directory


def _corpus_stream(model, directory: Path):
    """The token stream the runtime's data pipeline makes of a corpus directory with the model's tokenizer."""
    from pvlab.runtime import data

    return data.token_stream(data.encode_documents(model.tokenizer, data.read_corpus(directory)))


def _cli(args: list[str], env: dict | None = None):
    """Run `python -m pvlab.runtime ARGS` in this process (click's runner: exit code, output and
    any uncaught exception, which a user would see as a traceback)."""
    from click.testing import CliRunner

    from pvlab.runtime.cli import main

    return CliRunner().invoke(main, args, env=env, catch_exceptions=True)


def _clean_exit(result, code: int) -> bool:
    """Exited with `code`, and no exception other than the exit escaped (no traceback)."""
    return result.exit_code == code and (result.exception is None or isinstance(result.exception, SystemExit))


_WROTE = re.compile(r"wrote (?P<out>\S+): train_loss (?P<train>[\d.]+) val_loss (?P<val>[\d.]+) "
                    r"\(ln V = (?P<ln>[\d.]+)\)")


def _wrote_line_wrong(output: str, results: dict) -> int:
    """The CLI's closing line states the run's figures (to its 4 decimals)."""
    match = _WROTE.search(output)
    if match is None:
        return 1
    return int(any(abs(float(match[key]) - results[name]) > 5.1e-5
                   for key, name in (("train", "train_loss"), ("val", "val_loss"), ("ln", "ln_vocab"))))


_EVAL_LINE = re.compile(r"step\s+(\d+)/\d+\s+train_loss ([\d.]+)\s+val_loss ([\d.]+)")


def _progress_lines_wrong(output: str, history: list[dict]) -> int:
    """Each evaluation printed once, in order, with the recorded losses (to 4 decimals)."""
    printed = [(int(m[1]), float(m[2]), float(m[3])) for m in _EVAL_LINE.finditer(output)]
    if [step for step, _, _ in printed] != [record["step"] for record in history]:
        return 1
    return sum(1 for (_, train, val), record in zip(printed, history)
               if abs(train - record["train_loss"]) > 5.1e-5 or abs(val - record["val_loss"]) > 5.1e-5)


def runtime_cli_matches_library(*, device: str, steps: int = 15, tolerance: dict | None = None) -> dict:
    """`python -m pvlab.runtime` (in process, click's runner) into a temporary directory:
    `pretrain --pack-documents` of `steps` steps (fewer than the tiny recipe's 20 warmup steps),
    `eval --json` of what it wrote, `eval --corpus DIR --json` over three files written here,
    `inspect` and `inspect --json`, and `run --no-gpu --device cuda` (a contradiction).

    Observations: failed_commands (a command that should succeed exited non-zero or raised),
    recipe_mismatches (runtime.json's recipe against the options given: pack_documents true,
    warmup cut to steps // 10 — an integer step count — steps, sizes), wrote_line_wrong,
    eval_val_rel_diff / eval_train_rel_diff (eval's JSON against the float64 recomputation),
    eval_vs_pretrain_rel_diff (eval's val_loss against the one pretrain recorded for the same
    checkpoint), eval_tokens_wrong, corpus_label_wrong (eval names the synthetic corpus; with
    --corpus, the directory), corpus_val_rel_diff (eval --corpus against float64 over the
    directory's windows), inspect_lines_wrong (the text output's parameter count against the
    safetensors file's tensor sizes, its coverage line against the library's), inspect_json_differs
    (--json against runtime.checkpoint.inspect_checkpoint), no_gpu_refusal_wrong (the
    contradiction must exit 1 naming --no-gpu, without a traceback)."""
    from safetensors import safe_open

    from pvlab.runtime import checkpoint
    from pvlab.runtime.data import sequential_batches

    rtol, _ = rtol_atol(tolerance, "float32")
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="pv-cli-") as tmp:
        out = Path(tmp) / "ckpt"
        trained = _cli(["pretrain", "--steps", str(steps), "--batch-size", "4", "--seq-len", "32", "--documents",
                        "120", "--eval-every", str(steps), "--pack-documents", "--out", str(out)])   # with its progress lines
        if not _clean_exit(trained, 0) or not (out / "runtime.json").is_file():
            return _crashed(_CLI_KEYS, f"pretrain: {trained.exit_code} {trained.output[-300:]} {trained.exception!r}",
                            rtol)
        meta = json.loads((out / "runtime.json").read_text(encoding="utf-8"))
        written, results = meta["recipe"], meta["results"]
        expected = {"steps": steps, "batch_size": 4, "seq_len": 32, "num_documents": 120, "eval_every": steps,
                    "pack_documents": True, "warmup_steps": steps // 10}
        recipe_mismatches = sum(1 for key, value in expected.items()
                                if written.get(key) != value or type(written.get(key)) is not type(value))
        from pvlab.runtime.pretrain import Recipe

        oracle = _recomputed_losses(out, Recipe.from_dict(written))

        evaluated = _cli(["eval", str(out), "--json"])
        report = json.loads(evaluated.output.strip().splitlines()[-1]) if _clean_exit(evaluated, 0) else None
        if report is None:
            failed.append(f"eval: {evaluated.exit_code} {evaluated.exception!r}")
            report = {}

        corpus_dir = _python_corpus(Path(tmp) / "corpus", "def f{index}_{k}(x):\n    return x * {k} + {index}\n\n", 12)
        on_corpus = _cli(["eval", str(out), "--corpus", str(corpus_dir), "--json"])
        corpus_report = json.loads(on_corpus.output.strip().splitlines()[-1]) if _clean_exit(on_corpus, 0) else None
        if corpus_report is None:
            failed.append(f"eval --corpus: {on_corpus.exit_code} {on_corpus.exception!r}")
            corpus_report = {}
        model = oracle["model"]
        stream = _corpus_stream(model, corpus_dir)
        window = min(written["seq_len"], model.config.max_position_embeddings)
        corpus_total, corpus_count = _nll64(model, sequential_batches(stream, batch_size=written["batch_size"],
                                                                       seq_len=window, max_batches=None))

        shown = _cli(["inspect", str(out)])
        shown_json = _cli(["inspect", str(out), "--json"])
        for name, result in (("inspect", shown), ("inspect --json", shown_json)):
            if not _clean_exit(result, 0):
                failed.append(f"{name}: {result.exit_code} {result.exception!r}")
        library = checkpoint.inspect_checkpoint(out)
        with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
            parameters = sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())
        parameter_line = re.search(r"^parameters:\s+([\d,]+) ", shown.output, re.MULTILINE)
        coverage_line = re.search(r"^coverage:\s+(.*)$", shown.output, re.MULTILINE)
        inspect_lines_wrong = (int(parameter_line is None or int(parameter_line[1].replace(",", "")) != parameters)
                               + int(coverage_line is None or coverage_line[1] != library["coverage"]["summary"]))
        try:
            inspect_json_differs = int(json.loads(shown_json.output) != json.loads(json.dumps(library)))
        except ValueError:
            inspect_json_differs = 1

        refused = _cli(["run", str(out), "--prompt", "def", "--max-tokens", "2", "--no-gpu", "--device", "cuda"])
        no_gpu_refusal_wrong = int(not _clean_exit(refused, 1) or "--no-gpu" not in refused.output)

    return {
        "failed_commands": len(failed), "first_failure": failed[0] if failed else "", "rtol": rtol,
        "recipe_mismatches": recipe_mismatches,
        "wrote_line_wrong": _wrote_line_wrong(trained.output, results),
        "progress_lines_wrong": _progress_lines_wrong(trained.output, results["history"]),
        "defaults_wrong": int(results.get("device") != "cpu" or results.get("path") != "reference"),
        "eval_val_rel_diff": _rel(report.get("val_loss"), oracle["val_loss"]),
        "eval_train_rel_diff": _rel(report.get("train_loss"), oracle["train_loss"]),
        "eval_vs_pretrain_rel_diff": _rel(report.get("val_loss"), results["val_loss"]),
        "eval_tokens_wrong": int(report.get("tokens") != oracle["val_tokens"]),
        "corpus_label_wrong": int(report.get("corpus") != "synthetic")
        + int(corpus_report.get("corpus") != str(corpus_dir)),
        "corpus_val_rel_diff": _rel(corpus_report.get("val_loss"), corpus_total / max(corpus_count, 1)),
        "inspect_lines_wrong": inspect_lines_wrong,
        "inspect_json_differs": inspect_json_differs,
        "no_gpu_refusal_wrong": no_gpu_refusal_wrong,
    }


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def _single_rank_torchrun_env():
    """The environment torchrun gives rank 0 of a one-process job, for the duration of the block."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def torchrun_pretrain_single_rank(*, device: str, steps: int = 8, tolerance: dict | None = None) -> dict:
    """`python -m pvlab.runtime pretrain` as rank 0 of a one-process torchrun job (gloo, in this
    process), into a temporary directory: first with --micro-batch-size 3 of a batch of 4 (not a
    whole number of micro-batches per rank: refused), then with --micro-batch-size 2 (two
    micro-batches accumulated per step), `steps` steps, evals every steps/2.

    Observations: refusal_wrong (the bad micro-batch size must exit 1 naming --micro-batch-size,
    with nothing written), failed (the good run did not exit 0), wrote_line_wrong,
    group_left_open (the process group still initialised after the command returned),
    sharded_step_wrong / consolidated_step_wrong (trainer.json's step and runtime.json's
    distributed.step against `steps`), val_rel_diff / train_rel_diff (the recorded final
    losses against float64 from the consolidated checkpoint), loss_drop, eval_seconds_outside_wall."""
    import torch.distributed as dist

    if dist.is_initialized():
        raise RuntimeError("a process group is already initialised in this process; the check needs its own")
    from pvlab.runtime.pretrain import Recipe

    rtol, _ = rtol_atol(tolerance, "float32")
    common = ["pretrain", "--steps", str(steps), "--batch-size", "4", "--seq-len", "32", "--documents", "120",
              "--eval-every", str(max(1, steps // 2)), "--quiet"]
    with tempfile.TemporaryDirectory(prefix="pv-torchrun-") as tmp, _single_rank_torchrun_env():
        refused_out = Path(tmp) / "refused"
        refused = _cli(common + ["--micro-batch-size", "3", "--out", str(refused_out)])
        refusal_wrong = int(not _clean_exit(refused, 1) or "--micro-batch-size" not in refused.output
                            or refused_out.exists())
        if dist.is_initialized():
            dist.destroy_process_group()
        out = Path(tmp) / "ckpt"
        started = time.monotonic()
        trained = _cli(common + ["--micro-batch-size", "2", "--out", str(out)])
        wall = time.monotonic() - started
        group_left_open = int(dist.is_initialized())
        if group_left_open:
            dist.destroy_process_group()
        if not _clean_exit(trained, 0) or not (out / "runtime.json").is_file():
            return {**_crashed(_TORCHRUN_KEYS, f"{trained.exit_code} {trained.output[-300:]} {trained.exception!r}",
                               rtol), "refusal_wrong": refusal_wrong}
        meta = json.loads((out / "runtime.json").read_text(encoding="utf-8"))
        results = meta["results"]
        sharded = json.loads((out / "sharded" / "trainer.json").read_text(encoding="utf-8"))
        oracle = _recomputed_losses(out, Recipe.from_dict(meta["recipe"]))
    history = results["history"]
    return {
        "refusal_wrong": refusal_wrong, "failed": 0, "group_left_open": group_left_open, "first_failure": "",
        "rtol": rtol,
        "wrote_line_wrong": _wrote_line_wrong(trained.output, results),
        "sharded_step_wrong": int(sharded.get("step") != steps),
        "consolidated_step_wrong": int(meta.get("distributed", {}).get("step") != steps),
        "val_rel_diff": _rel(results["val_loss"], oracle["val_loss"]),
        "train_rel_diff": _rel(results["train_loss"], oracle["train_loss"]),
        "loss_drop": history[0]["val_loss"] - history[-1]["val_loss"],
        "eval_seconds_outside_wall": sum(1 for record in history if not 0.0 <= record["seconds"] <= wall),
    }


def subjects_honour_cache_dir(*, device: str, help_words: str = "Subjects: the named, reproducible models",
                              tolerance: dict | None = None) -> dict:
    """`python -m pvlab.runtime.subjects` (its `main`, in process) and the checkpoint cache of
    runtime.subjects / runtime.zoo, against temporary cache directories only.

    - `list` returns 0 and names every subject; `-h` exits 0 with the module's purpose
      (`help_words`); no command at all is a usage error (exit 2);
    - `build tiny-trained --cache-dir C`, C holding a copy of the tiny-trained entry, returns 0
      and names C's entry (nothing is trained: the entry is found);
    - checkpoint_dir of a stdlib subject with build=False in an empty C is refused naming C; once
      C holds an entry of the expected name, that entry is returned;
    - on a machine without CUDA, checkpoint_dir of a CUDA subject is refused (SubjectUnavailable
      saying the machine lacks it) and C is left untouched;
    - zoo.repository_root of a directory outside any repository is that directory;
    - zoo.build_cached creates a missing cache directory, builds once (a second call finds it),
      names the entry <name>-<key[:16]>, and a build that raises leaves no staging directory;
    - zoo.tiny_random names its entry tiny-random-<digest of the step-0 recipe>.

    Observations: wrong (the number of those statements that failed) and first_wrong."""
    import contextlib as _contextlib
    import io

    from pvlab.runtime import subjects, zoo

    from . import fixtures

    wrong: list[str] = []
    checked: list[str] = []

    def expect(ok: bool, what: str) -> None:
        checked.append(what)
        if not ok:
            wrong.append(what)

    def main(argv):
        stdout, stderr = io.StringIO(), io.StringIO()
        with _contextlib.redirect_stdout(stdout), _contextlib.redirect_stderr(stderr):
            try:
                code = subjects.main(argv)
            except SystemExit as exit_:
                code = ("exit", exit_.code)
            except Exception as error:  # noqa: BLE001 - a traceback for the user is the finding
                code = ("raised", type(error).__name__)
        return code, stdout.getvalue() + stderr.getvalue()

    code, text = main(["list"])
    expect(code == 0 and all(name in text for name in subjects.SUBJECTS), f"list: {code}")
    code, text = main(["-h"])
    expect(code == ("exit", 0) and help_words in text, f"-h: {code}")
    code, text = main([])
    expect(code == ("exit", 2), f"no command: {code}")

    with tempfile.TemporaryDirectory(prefix="pv-subjects-") as tmp:
        root = Path(tmp)
        source = fixtures.checkpoint_dir("tiny-trained")
        cache = root / "cache"
        shutil.copytree(source, cache / source.name)
        code, text = main(["build", "tiny-trained", "--cache-dir", str(cache)])
        expect(code == 0 and f"subject tiny-trained: {cache / source.name}" in text, f"build tiny-trained: {code}")

        stdlib_cache = root / "stdlib-cache"
        named = None
        try:
            subjects.checkpoint_dir("qwen2-0.5b-stdlib", stdlib_cache, build=False)
            expect(False, "an unbuilt subject was returned")
        except subjects.SubjectUnavailable as error:
            named = re.search(r"expected (qwen2-0\.5b-stdlib-[0-9a-f]{16})", str(error))
            expect(str(stdlib_cache) in str(error) and named is not None, f"refusal names {error}")
        except Exception as error:  # noqa: BLE001
            expect(False, f"checkpoint_dir raised {type(error).__name__}: {error}")
        if named:
            (stdlib_cache / named[1]).mkdir(parents=True)
            (stdlib_cache / named[1] / zoo.BUILD_RECORD_NAME).write_text("{}\n", encoding="utf-8")
            try:
                found = subjects.checkpoint_dir("qwen2-0.5b-stdlib", stdlib_cache, build=False)
                expect(found == stdlib_cache / named[1], f"cached entry not returned: {found}")
            except Exception as error:  # noqa: BLE001 - the entry is there: a refusal is the finding
                expect(False, f"the cached entry was not found: {type(error).__name__}: {error}")

        if not torch.cuda.is_available():   # where CUDA is present the subject would really be built
            absent = root / "absent-cache"
            try:
                subjects.checkpoint_dir("llama-370m-stdlib", absent)
                expect(False, "a CUDA subject was built without CUDA")
            except subjects.SubjectUnavailable as error:
                expect("lacks" in str(error) and not absent.exists(), f"lacks-CUDA refusal: {error}")
            except Exception as error:  # noqa: BLE001
                expect(False, f"lacks-CUDA: {type(error).__name__}: {error}")

        outside = root / "outside"
        outside.mkdir()
        if not any((d / ".git").exists() for d in (outside, *outside.parents)):
            expect(zoo.repository_root(outside) == outside.resolve(), "repository_root outside a repository")

        built: list[Path] = []

        def build(directory: Path) -> dict:
            directory.mkdir()
            (directory / "payload.txt").write_text("x", encoding="utf-8")
            built.append(directory)
            return {"payload": 1}

        key = "0123456789abcdef" * 4
        nested = root / "new" / "deeper"
        try:
            first = zoo.build_cached("probe", key, build, nested)
            again = zoo.build_cached("probe", key, build, nested)
            record = json.loads((first / zoo.BUILD_RECORD_NAME).read_text(encoding="utf-8"))
            expect(first == again == nested / f"probe-{key[:16]}" and len(built) == 1
                   and (first / "payload.txt").is_file() and record.get("name") == "probe", "build_cached entry")
        except Exception as error:  # noqa: BLE001 - a fresh cache directory must work
            expect(False, f"build_cached into a new directory: {type(error).__name__}: {error}")

        def broken(directory: Path) -> dict:
            directory.mkdir()
            (directory / "half.txt").write_text("x", encoding="utf-8")
            raise OSError("disk full (planted by the check)")

        debris_root = root / "debris"
        debris_root.mkdir()
        try:
            zoo.build_cached("broken", key, broken, debris_root)
            expect(False, "a failed build returned an entry")
        except OSError:
            leftovers = [p.name for p in debris_root.iterdir() if p.is_dir()]
            expect(not leftovers, f"a failed build left {leftovers}")

        step_zero = _small_recipe(steps=0, seed=0)
        try:
            random_dir = zoo.tiny_random(root / "random", recipe=_small_recipe(steps=4))
            expect(random_dir == root / "random" / f"tiny-random-{step_zero.digest()[:16]}"
                   and zoo.build_record(random_dir).get("name") == "tiny-random", f"tiny_random entry {random_dir}")
        except Exception as error:  # noqa: BLE001 - a fresh cache directory must work
            expect(False, f"tiny_random into a new directory: {type(error).__name__}: {error}")
    return {"wrong": len(wrong), "first_wrong": wrong[0] if wrong else "", "statements": len(checked)}
