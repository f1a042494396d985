"""Probes of the planted bugs of mutants/independent_review.py (issue #12, second blind batch),
for test_mutants.py: each is a cheap direct call whose result changes while its mutant is
active. Imported by test_mutants.py (which collects every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import torch

from pvlab.runtime import checkpoint, cli, corpus, data, kernels, parity, subjects, trainer, zoo
from pvlab.runtime.config import ModelConfig, preset
from pvlab.runtime.data import LMBatch
from pvlab.runtime import model as models
from pvlab.runtime.model import CausalLM, KVCache


def _tiny(seed: int = 0, **changes) -> CausalLM:
    model = CausalLM(preset("tiny").replace(**changes))
    models.init_weights(model, seed)  # looked up at call time: the init mutant patches it
    return model.eval()


def _ids(rows: int = 2, length: int = 12, seed: int = 3) -> torch.Tensor:
    return torch.randint(1, 512, (rows, length), generator=torch.Generator().manual_seed(seed))


# ---- model -----------------------------------------------------------------------------------------

def probe_attention_heads_merged_without_transpose():
    with torch.no_grad():
        return _tiny()(_ids())


def probe_kv_cache_length_reads_head_axis():
    cache = KVCache(2)
    cache.update(0, torch.zeros(1, 2, 7, 16), torch.zeros(1, 2, 7, 16))
    return cache.length


def probe_init_final_norm_drawn_random():
    return _tiny().model.norm.weight.detach().clone()


# ---- kernels ---------------------------------------------------------------------------------------

def probe_attention_scaled_by_head_dim():
    q = torch.randn(1, 2, 5, 16, generator=torch.Generator().manual_seed(0))
    return kernels.attention_reference(q, q, q)


def probe_padded_mask_lets_queries_see_padding():
    return kernels.padded_causal_mask(torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]), 4)


def probe_chunked_cross_entropy_backward_scores_padding():
    hidden = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(0), requires_grad=True)
    weight = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
    targets = torch.tensor([[3, 5, kernels.IGNORE_INDEX, kernels.IGNORE_INDEX]])
    kernels.chunked_linear_cross_entropy(hidden, weight, targets, compute_dtype=torch.float32).backward()
    return hidden.grad


def probe_sampling_ignores_seeded_generator():
    logits = torch.zeros(1, 1000)
    return tuple(int(kernels.sample_pick(logits, 1.0, torch.Generator().manual_seed(0))) for _ in range(2))


# ---- config, checkpoint ----------------------------------------------------------------------------

def probe_rope_theta_read_from_legacy_key_only():
    hf = preset("qwen2-0.5b").to_hf_dict()
    del hf["rope_theta"]
    return ModelConfig.from_hf_dict(hf).rope_theta


def probe_saved_head_is_embedding_copy():
    return checkpoint.model_tensors(_tiny(tie_word_embeddings=False))["lm_head.weight"]


# ---- trainer ---------------------------------------------------------------------------------------

def probe_cosine_progress_ignores_warmup():
    return trainer.learning_rate(4, peak=1.0, warmup_steps=4, total_steps=10, min_lr=0.1)


def probe_gradients_never_zeroed():
    run = trainer.Trainer(_tiny(), lr=1e-3, grad_clip=0.0)
    batch = LMBatch.from_sequences(_ids(2, 13))
    run.train_batch(batch)
    run.train_batch(batch)
    return run.model.model.norm.weight.grad.clone()


def probe_evaluate_averages_batch_means():
    run = trainer.Trainer(_tiny(), lr=1e-3)
    return run.evaluate([LMBatch.from_sequences(_ids(3, 13, seed=4)), LMBatch.from_sequences(_ids(1, 13, seed=5))])


# ---- data, corpus ----------------------------------------------------------------------------------

def probe_documents_encoded_without_end_of_text():
    documents = data.synthetic_python_corpus(20, seed=0)
    tokenizer = data.train_tokenizer(documents, 300)
    return tuple(len(ids) for ids in data.encode_documents(tokenizer, documents[:3]))


def probe_held_out_threshold_inverted():
    files = tuple(corpus.SourceFile(f"m{i}.py", f"x = {i}\n") for i in range(40))
    train, held_out = corpus.split_by_path(corpus.Corpus("probe", Path("."), files), val_fraction=0.1, seed=0)
    return len(held_out)


# ---- generation, pretraining, cli, zoo, subjects, parity -------------------------------------------

def probe_eos_ignored_by_generate():
    generate = importlib.import_module("pvlab.runtime.generate").generate
    model = _tiny()
    first = generate(model, [1, 2, 3], max_new_tokens=1).new_ids[0]
    result = generate(model, [1, 2, 3], max_new_tokens=4, eos_token_id=first)
    return tuple(result.new_ids), result.stopped_on_eos


def probe_train_loss_scored_on_heldout_stream():
    from pvlab.runtime.pretrain import PreparedData, Recipe

    prepared = PreparedData(tokenizer=None, train_documents=[], heldout_documents=[],
                            train_stream=torch.arange(100), heldout_stream=torch.arange(100, 200))
    return prepared.train_eval_batches(Recipe(batch_size=2, seq_len=8, eval_batches=1))[0].inputs


def probe_cli_eval_ignores_batches():
    """--batches -1 is refused by the command's body; a command that drops the option scores
    the recipe's batches instead and accepts it."""
    try:
        cli.main.commands["eval"].callback(checkpoint_dir=Path(zoo.tiny_trained()), device="cpu", path=None,
                                           corpus_dir=None, batches=-1, as_json=True)
        return "accepted"
    except Exception as error:  # noqa: BLE001 - which refusal it is, is the probe
        return type(error).__name__


def probe_tiny_random_ignores_seed():
    with tempfile.TemporaryDirectory(prefix="pv-probe-") as cache:
        built = {}

        def record(name, key, build, cache_dir=None):
            built["key"] = key
            return Path(cache)

        original = zoo.build_cached
        zoo.build_cached = record
        try:
            zoo.tiny_random(cache, seed=7)
        finally:
            zoo.build_cached = original
        return built["key"]


def probe_subject_key_ignores_training_path():
    item = subjects.subject("tiny-trained")
    return item.key(item.recipe)


def probe_parity_cosine_pooled_over_positions():
    reference = torch.randn(1, 8, 32, generator=torch.Generator().manual_seed(0))
    candidate = reference.clone()
    candidate[0, 3] = -candidate[0, 3]
    return parity.compare_logits(reference, candidate, device="cpu", path="fast").min_cosine
