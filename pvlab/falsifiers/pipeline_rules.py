"""Rules of the data and decoding pipeline that their docstrings state and `pv mutate` found no
falsifier reading (docs/mutants.md, issue #26): how the packer fills rows and how packed batches
cover a pass, how a tokenizer splits text before BPE, that sampling is reproducible from its
seed at every temperature, and that generate_texts is generate_batch behind the tokenizer.

Oracles, each written here and independent of the code under test: first-fit packing in order
and next-token shifting as two loops, Qwen2's published pre-tokenization pattern run through the
`regex` package, two runs of the same seeded request, and the single-prompt token path
(tokenizer.encode, generate, tokenizer.decode) composed by hand. A crash counts against the
runtime (as a wrong outcome), never as an error of the check.
"""

from __future__ import annotations

import importlib
import unicodedata

import torch

from ._util import generator

# Qwen2's tokenizer.json (Qwen/Qwen2-0.5B on the Hugging Face hub): the Split pre-tokenizer's pattern.
QWEN2_PRETOKENIZE_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                             r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
SPLIT_SAMPLES = ("def f(x):\n    return x + 1\n", "It's 2026: naïve café, 12345 tokens!!  \n\n  end",
                 "  leading spaces\tand\ttabs\r\nCRLF", "中文字符 and ünïcödé\u00a0nbsp")


def _first_fit_rows(lengths: list[int], seq_len: int) -> list[list[int]]:
    """Documents (by index) laid in rows in order, a new row whenever the next one's n - 1
    positions would overflow seq_len."""
    rows: list[list[int]] = []
    used = seq_len + 1
    for index, n in enumerate(lengths):
        if used + n - 1 > seq_len:
            rows.append([])
            used = 0
        rows[-1].append(index)
        used += n - 1
    return rows


def packing_fills_rows(*, device: str, seed: int = 0) -> dict:
    """pack_documents fills a row exactly to seq_len before opening the next (first fit in order);
    LMBatch.from_packed_rows without a width is as wide as its longest row, each document holding
    its own next-token pairs; and the first pass of packed_batches covers every document exactly
    once when the rows fill whole batches.

    Observations: row_mismatches, width_wrong, target_mismatches, pass_coverage_wrong."""
    from pvlab.runtime import data
    from pvlab.runtime.kernels import IGNORE_INDEX

    lengths = [5, 5, 7, 3, 9, 4, 2, 6]
    documents = [list(range(100 * i, 100 * i + n)) for i, n in enumerate(lengths)]
    row_mismatches = 0
    for seq_len in (14, 8, 12):  # 14: 4 + 4 + 6 fills the first row exactly
        try:
            rows = data.pack_documents(documents, seq_len=seq_len)
            got = [[documents.index(piece) for piece in row] for row in rows]
        except Exception:  # noqa: BLE001 - a packer that raises packs nothing right
            got = None
        row_mismatches += int(got != _first_fit_rows(lengths, seq_len))
    rows = [[documents[0], documents[2]], [documents[4]], [documents[3], documents[6]]]
    width_wrong = target_mismatches = 0
    try:
        batch = data.LMBatch.from_packed_rows(rows)
        width = max(sum(len(d) - 1 for d in row) for row in rows)
        width_wrong = int(batch.inputs.shape != (3, width))
        for r, row in enumerate(rows):
            expected = [t for document in row for t in document[1:]]
            expected += [IGNORE_INDEX] * (batch.targets.shape[1] - len(expected))
            target_mismatches += int(batch.targets[r].tolist() != expected)
    except Exception:  # noqa: BLE001
        width_wrong = target_mismatches = 1
    same_length = [list(range(1000 + 10 * i, 1000 + 10 * i + 5)) for i in range(8)]   # 2 a row of 8: 4 rows
    try:
        stream = data.packed_batches(same_length, batch_size=2, seq_len=8, seed=seed)
        firsts = [int(t) for _ in range(2) for t in next(stream).inputs[:, [0, 4]].flatten()]
        pass_coverage_wrong = int(sorted(firsts) != [d[0] for d in same_length])
    except Exception:  # noqa: BLE001
        pass_coverage_wrong = 1
    return {"row_mismatches": row_mismatches, "width_wrong": width_wrong, "target_mismatches": target_mismatches,
            "pass_coverage_wrong": pass_coverage_wrong}


def tokenizer_splits_like_qwen2(*, device: str) -> dict:
    """A tokenizer from data.train_tokenizer splits text before BPE where Qwen2's published
    pre-tokenization pattern matches (after NFC), so no token spans two of its pieces.

    Observations: samples, split_mismatches."""
    import regex

    from pvlab.runtime import data

    tokenizer = data.train_tokenizer(list(SPLIT_SAMPLES) * 3, 300)
    mismatches = 0
    for text in SPLIT_SAMPLES:
        normal = unicodedata.normalize("NFC", text)
        want = [match.span() for match in regex.finditer(QWEN2_PRETOKENIZE_PATTERN, normal)]
        got = [span for _piece, span in tokenizer.pre_tokenizer.pre_tokenize_str(normal)]
        mismatches += int(got != want)
    return {"samples": len(SPLIT_SAMPLES), "split_mismatches": mismatches}


def _generation_model(seed: int):
    from pvlab.runtime import checkpoint
    from pvlab.runtime.config import ModelConfig

    config = ModelConfig(model_type="qwen2", vocab_size=300, hidden_size=16, intermediate_size=24,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=True, qkv_bias=True, bos_token_id=0, eos_token_id=0,
                         initializer_range=0.02)
    return checkpoint.init_model(config=config, weights="random", seed=seed, device="cpu", parity_gate=False).eval()


def sampling_and_text_generation(*, device: str, seed: int = 0) -> dict:
    """generate with temperature 0.5, 1.0 and 1.5 gives the same tokens twice from the same seed
    (and the seeds 0..3 do not all agree: it samples); generate_texts over three prompts gives,
    for each, tokenizer.decode(prompt ids + the new ids of generate on that prompt alone, a final
    end-of-text left out).

    Observations: temperatures, unreproducible, never_varies, texts, text_mismatches."""
    from pvlab.runtime import data

    generation = importlib.import_module("pvlab.runtime.generate")  # the package re-exports the function
    model = _generation_model(seed)
    prompt = torch.randint(1, 300, (5,), generator=generator(seed)).tolist()
    unreproducible = never_varies = 0
    for temperature in (0.5, 1.0, 1.5):
        try:
            runs = [generation.generate(model, prompt, max_new_tokens=8, temperature=temperature, seed=s).new_ids
                    for s in (7, 7, 0, 1, 2, 3)]
        except Exception:  # noqa: BLE001 - a request that raises reproduces nothing
            unreproducible += 1
            continue
        unreproducible += int(runs[0] != runs[1])
        never_varies += int(all(run == runs[2] for run in runs[3:]))
    tokenizer = data.train_tokenizer([p for p in SPLIT_SAMPLES] * 2, 300)
    prompts = ["def f(x):", "naïve café", "12345 tokens"]
    text_mismatches = 0
    try:
        texts = generation.generate_texts(model, tokenizer, prompts, max_new_tokens=6)
    except Exception:  # noqa: BLE001 - a documented call that raises gives no text right
        texts = [None] * len(prompts)
    for prompt_text, text in zip(prompts, texts):
        ids = tokenizer.encode(prompt_text).ids
        try:
            alone = generation.generate(model, ids, max_new_tokens=6, eos_token_id=model.config.eos_token_id)
        except Exception:  # noqa: BLE001 - no token path to compare with: a mismatch
            text_mismatches += 1
            continue
        new_ids = alone.new_ids[:-1] if alone.stopped_on_eos else alone.new_ids
        text_mismatches += int(text != tokenizer.decode(ids + new_ids))
    return {"temperatures": 3, "unreproducible": unreproducible, "never_varies": never_varies,
            "texts": len(prompts), "text_mismatches": text_mismatches}
