"""`python -m pvlab.runtime`: pretrain, eval, run (generate) and inspect checkpoints.

Every input error (a RuntimeInputError) is printed as one `error: ...` line naming the file or
option at fault, with exit status 1 and no traceback; click reports malformed command lines
with status 2. Nothing is written half-way: checkpoints are published atomically.

`run --no-gpu` never calls into torch.cuda: the device is resolved with allow_gpu=False before
anything else happens, and nothing on the CPU path asks CUDA anything.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

import click

from .errors import ArgumentError, RuntimeInputError

PATH_CHOICE = click.Choice(["reference", "fast"])
BACKEND_CHOICE = click.Choice(["math", "flash", "efficient", "cudnn"])  # kernels.ATTENTION_BACKENDS


def _fail(error: Exception) -> None:
    click.echo(f"error: {error}", err=True)
    sys.exit(1)


class _Group(click.Group):
    """Turns RuntimeInputError into a clean message and exit status 1."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except RuntimeInputError as error:
            _fail(error)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Train, evaluate, sample from and inspect Qwen2/Llama-family checkpoints."""


@main.command()
@click.option("--config", "config_name", default="tiny", show_default=True,
              help="Architecture preset: tiny, qwen2-0.5b, llama-370m (ignored with --init).")
@click.option("--steps", type=int, default=None, help="Optimizer steps (default: the tiny recipe's).")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, cuda:N or auto.")
@click.option("--path", "path", type=PATH_CHOICE, default=None, help="Execution path (default: fast on CUDA, reference on CPU).")
@click.option("--init", "init_dir", type=click.Path(path_type=Path), default=None,
              help="Start from this checkpoint directory (its config and tokenizer) instead of random init.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True, help="Checkpoint directory to write.")
@click.option("--batch-size", type=int, default=None)
@click.option("--seq-len", type=int, default=None)
@click.option("--lr", type=float, default=None, help="Peak learning rate.")
@click.option("--seed", type=int, default=None, help="Initialisation and batch-order seed.")
@click.option("--eval-every", type=int, default=None)
@click.option("--corpus", "corpus_dir", type=click.Path(path_type=Path), default=None,
              help="Train on the *.py files under this directory instead of the synthetic corpus.")
@click.option("--documents", type=int, default=None, help="Synthetic corpus size in documents.")
@click.option("--compile", "use_compile", is_flag=True, help="torch.compile the decoder layers.")
@click.option("--compile-model", is_flag=True,
              help="torch.compile the whole decoder body as one graph instead of layer by layer.")
@click.option("--micro-batch-size", type=int, default=None,
              help="Rows per forward/backward; gradients accumulate over the batch into one optimizer step (the "
                   "last micro-batch may be short). Under torchrun: rows per rank's forward/backward; each rank's "
                   "share of --batch-size must be a whole number of them.")
@click.option("--pack-documents", is_flag=True,
              help="Train on whole documents packed into rows (no attention across documents, positions restart).")
@click.option("--attention-backend", type=BACKEND_CHOICE, default=None,
              help="Pin the fast path's SDPA kernel (cpu: math, flash; cuda: also efficient, cudnn).")
@click.option("--strategy", type=click.Choice(["ddp", "fsdp"]), default="ddp", show_default=True,
              help="Under torchrun: DistributedDataParallel or FSDP2 (fully_shard).")
@click.option("--accumulation-steps", type=int, default=None, hidden=True,
              help="Replaced by --micro-batch-size (refused with a message saying so).")
@click.option("--quiet", is_flag=True, help="No progress output.")
def pretrain(config_name, steps, device, path, init_dir, out_dir, batch_size, seq_len, lr, seed, eval_every,
             corpus_dir, documents, use_compile, compile_model, micro_batch_size, pack_documents, attention_backend, strategy,
             accumulation_steps, quiet) -> None:
    """Train a model and write a Hugging Face checkpoint directory to --out.

    Started by `torchrun --nproc-per-node N -m pvlab.runtime pretrain ...` it trains data-parallel
    (docs/distributed.md): --batch-size is then the global batch, split over the ranks."""
    from . import distributed
    from .checkpoint import read_runtime_meta
    from .config import preset
    from .pretrain import Recipe
    from .pretrain import pretrain as run_pretraining
    from .zoo import TINY_RECIPE

    if accumulation_steps is not None:
        raise click.UsageError("--accumulation-steps was replaced by --micro-batch-size M, the rows of one "
                               "forward/backward, on one device and under torchrun alike (under torchrun, per rank: "
                               "M = batch size / ranks / accumulation steps)")
    base = TINY_RECIPE
    if init_dir is None:
        preset(config_name)  # refuse an unknown preset before any work
    elif Path(init_dir).is_dir() and read_runtime_meta(Path(init_dir)).get("recipe"):
        # Fine-tuning continues on the data (corpus, split, window size) the checkpoint was trained
        # on, so its first eval scores exactly what `eval` of the checkpoint scores.
        base = Recipe.from_dict(read_runtime_meta(Path(init_dir))["recipe"])
    overrides = {"config": config_name, "steps": steps, "batch_size": batch_size, "seq_len": seq_len, "lr": lr,
                 "seed": seed, "eval_every": eval_every, "num_documents": documents,
                 "corpus_dir": None if corpus_dir is None else str(corpus_dir),
                 "micro_batch_size": micro_batch_size, "pack_documents": pack_documents or None}
    recipe = dataclasses.replace(base, **{k: v for k, v in overrides.items() if v is not None})
    if recipe.lr != base.lr:
        recipe = dataclasses.replace(recipe, min_lr=recipe.lr / 10)
    if recipe.warmup_steps > recipe.steps:
        recipe = dataclasses.replace(recipe, warmup_steps=recipe.steps // 10)
    if use_compile and compile_model:
        raise ArgumentError("give --compile (layer by layer) or --compile-model (the whole decoder), not both")
    compile_choice = "model" if compile_model else use_compile
    if distributed.torchrun_env():
        if init_dir is not None or compile_choice or pack_documents or attention_backend:
            raise ArgumentError("--init, --compile(-model), --pack-documents and --attention-backend "
                                "are not supported under torchrun yet")
        steps_per_batch = _micro_batches_per_rank(recipe.batch_size, int(os.environ["WORLD_SIZE"]),
                                                  recipe.micro_batch_size)
        try:
            results = distributed.pretrain(recipe, out_dir, device=device, path=path, strategy=strategy,
                                           accumulation_steps=steps_per_batch, progress=not quiet)
        finally:
            distributed.shutdown()
        if int(os.environ["RANK"]) != 0:
            return
    else:
        results = run_pretraining(recipe, out_dir, device=device, path=path, init=init_dir, progress=not quiet,
                                  compile=compile_choice, attention_backend=attention_backend)
    click.echo(f"wrote {out_dir}: train_loss {results['train_loss']:.4f} val_loss {results['val_loss']:.4f} "
               f"(ln V = {results['ln_vocab']:.4f}) in {results['seconds']:.1f}s")


def _micro_batches_per_rank(batch_size: int, world_size: int, micro_batch_size: int | None) -> int:
    """Under torchrun, how many micro-batches of `micro_batch_size` rows each rank accumulates per
    optimizer step (its share of the global batch divided into them; 1 without a micro-batch size)."""
    if micro_batch_size is None:
        return 1
    share, rest = divmod(batch_size, world_size)
    if micro_batch_size <= 0 or rest or share % micro_batch_size:
        raise ArgumentError(f"--micro-batch-size {micro_batch_size}: under torchrun each rank's share of --batch-size "
                            f"{batch_size} over {world_size} ranks must be a whole number of micro-batches of that "
                            "many rows")
    return share // micro_batch_size


@main.command(name="eval")
@click.argument("checkpoint_dir", type=click.Path(path_type=Path))
@click.option("--device", default="cpu", show_default=True)
@click.option("--path", "path", type=PATH_CHOICE, default=None)
@click.option("--corpus", "corpus_dir", type=click.Path(path_type=Path), default=None,
              help="Score every *.py file under this directory (default: the checkpoint's own held-out split).")
@click.option("--batches", type=int, default=None, help="Held-out batches to score (default: the recipe's).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def evaluate(checkpoint_dir, device, path, corpus_dir, batches, as_json) -> None:
    """Held-out loss of a checkpoint."""
    from . import data
    from .checkpoint import load
    from .errors import DataError
    from .pretrain import Recipe, heldout_for_checkpoint
    from .trainer import Trainer

    started = time.monotonic()
    model = load(checkpoint_dir, device=device, path=path)
    recipe_values = (model.runtime_meta or {}).get("recipe")
    recipe = Recipe.from_dict(recipe_values) if recipe_values else None
    if batches is not None and batches <= 0:
        raise DataError(f"--batches must be positive, got {batches}")
    trainer = Trainer(model)
    result = {"checkpoint": str(checkpoint_dir), "device": str(model.device), "path": model.path,
              "vocab_size": model.config.vocab_size, "ln_vocab": math.log(model.config.vocab_size)}
    if corpus_dir is not None:
        if model.tokenizer is None:
            raise DataError(f"{checkpoint_dir} has no tokenizer.json; cannot tokenise --corpus {corpus_dir}")
        documents = data.read_corpus(corpus_dir)
        seq_len = min(recipe.seq_len if recipe else 128, model.config.max_position_embeddings)
        stream = data.token_stream(data.encode_documents(model.tokenizer, documents))
        heldout = data.sequential_batches(stream, batch_size=recipe.batch_size if recipe else 8, seq_len=seq_len,
                                          max_batches=batches)
        result["corpus"] = str(corpus_dir)
    elif recipe is not None:
        if batches is not None:
            recipe = dataclasses.replace(recipe, eval_batches=batches)
        prepared = heldout_for_checkpoint(model, recipe)
        heldout = prepared.heldout_batches(recipe)
        result["train_loss"] = trainer.evaluate(prepared.train_eval_batches(recipe))
        result["heldout_documents"] = len(prepared.heldout_documents)
        result["corpus"] = "synthetic" if recipe.corpus_dir is None else recipe.corpus_dir
    else:
        raise DataError(f"{checkpoint_dir} records no training recipe (runtime.json); pass --corpus DIR to "
                        "choose what to evaluate on")
    result["val_loss"] = trainer.evaluate(heldout)
    result["perplexity"] = math.exp(result["val_loss"])
    result["tokens"] = sum(b.num_target_tokens for b in heldout)
    result["seconds"] = round(time.monotonic() - started, 2)
    if as_json:
        click.echo(json.dumps(result, sort_keys=True))
        return
    for key in ("checkpoint", "device", "path", "corpus", "tokens", "train_loss", "val_loss", "perplexity", "ln_vocab"):
        if key in result:
            value = result[key]
            click.echo(f"{key:>12}: {value:.4f}" if isinstance(value, float) else f"{key:>12}: {value}")


@main.command()
@click.argument("checkpoint_dir", type=click.Path(path_type=Path))
@click.option("--prompt", "prompts", required=True, multiple=True,
              help="Repeat for several prompts: they are decoded together in one left-padded batch.")
@click.option("--max-tokens", type=int, default=64, show_default=True)
@click.option("--temperature", type=float, default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-k", type=int, default=None)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", default=None, help="cpu, cuda, cuda:N (default: a GPU if present, unless --no-gpu).")
@click.option("--path", "path", type=PATH_CHOICE, default=None)
@click.option("--attention-backend", type=BACKEND_CHOICE, default=None, help="Pin the fast path's SDPA kernel.")
@click.option("--no-gpu", is_flag=True, help="Run on the CPU and never initialise CUDA.")
def run(checkpoint_dir, prompts, max_tokens, temperature, top_k, seed, device, path, attention_backend, no_gpu) -> None:
    """Generate a continuation of each --prompt."""
    from .checkpoint import load
    from .devices import resolve_device
    from .generate import generate_text, generate_texts

    target = resolve_device(device, allow_gpu=not no_gpu, argument="--device")
    model = load(checkpoint_dir, device=target, path=path, allow_gpu=not no_gpu)
    if model.tokenizer is None:
        raise RuntimeInputError(f"{checkpoint_dir}: no tokenizer.json; `run` needs one to encode --prompt")
    if attention_backend is not None:
        model.set_attention_backend(attention_backend)
    if len(prompts) == 1:
        click.echo(generate_text(model, model.tokenizer, prompts[0], max_new_tokens=max_tokens,
                                 temperature=temperature, top_k=top_k, seed=seed))
        return
    texts = generate_texts(model, model.tokenizer, prompts, max_new_tokens=max_tokens, temperature=temperature,
                           top_k=top_k, seed=seed)
    for index, text in enumerate(texts):
        click.echo(f"--- prompt {index + 1}")
        click.echo(text)


@main.command()
@click.argument("checkpoint_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def inspect(checkpoint_dir, as_json) -> None:
    """Config, parameter count and tensor coverage (reads headers only)."""
    from .checkpoint import inspect_checkpoint

    info = inspect_checkpoint(checkpoint_dir)
    if as_json:
        click.echo(json.dumps(info, sort_keys=True))
        return
    config, coverage = info["config"], info["coverage"]
    click.echo(f"checkpoint:   {info['checkpoint']}")
    click.echo(f"architecture: {config['architectures'][0]} (model_type {config['model_type']})")
    click.echo(f"shape:        {config['num_hidden_layers']} layers, hidden {config['hidden_size']}, "
               f"{config['num_attention_heads']} heads / {config['num_key_value_heads']} KV heads, "
               f"intermediate {config['intermediate_size']}, vocab {config['vocab_size']}, "
               f"context {config['max_position_embeddings']}, rope theta {config['rope_theta']:g}, "
               f"tied head {config['tie_word_embeddings']}")
    click.echo(f"parameters:   {info['parameters_expected']:,} ({info['parameters_expected'] / 1e6:.1f}M)")
    click.echo(f"coverage:     {coverage['summary']}")
    for name in coverage["missing"][:10]:
        click.echo(f"  missing  {name}")
    for name in coverage["extra"][:10]:
        click.echo(f"  extra    {name}")
    for item in coverage["mismatched"][:10]:
        click.echo(f"  shape    {item['name']}: file {item['found']}, expected {item['expected']}")
    click.echo(f"files:        {', '.join(info['files'])} ({', '.join(info['dtypes'])})")
    click.echo(f"tokenizer:    {'tokenizer.json' if info['tokenizer'] else 'none'}")
    results = (info["runtime"] or {}).get("results")
    if results:
        click.echo(f"trained:      {results['steps']} steps, val_loss {results['val_loss']:.4f} "
                   f"(ln V {results['ln_vocab']:.4f})")
    if coverage["tensors_populated"] != coverage["tensors_expected"] or coverage["extra"]:
        _fail(RuntimeInputError(f"{checkpoint_dir}: checkpoint does not match its architecture "
                                f"({coverage['summary']}); runtime.load would refuse it"))
