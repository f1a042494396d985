"""Packed batches (LMBatch.from_packed_rows, CausalLM.forward / .loss with document_ids) give each
document exactly what it gets alone.

Several documents laid end to end in one row must not see each other (block-diagonal causal
attention) and each must start again at position 0: otherwise the second document of a row is
conditioned on the first (the public "cross-contamination" of naive packing) or rotated as if it
sat further into the context. The check packs documents of different lengths with the runtime's
own packer, so most rows hold several documents, and compares the packed logits of every
document with one forward of that document alone; the expected loss is the token-weighted mean
cross-entropy of the documents alone, computed here in float64 from their logits.
"""

from __future__ import annotations

import torch

from . import fixtures
from ._util import compared, generator, rtol_atol, torch_device


def _documents(vocab: int, count: int, min_len: int, max_len: int, seed: int) -> list[list[int]]:
    lengths = torch.randint(min_len, max_len + 1, (count,), generator=generator(seed))
    tokens = torch.randint(0, vocab, (count, max_len), generator=generator(seed + 1))
    return [tokens[i, :int(n)].tolist() for i, n in enumerate(lengths)]


def _float64_mean_cross_entropy(logits: list[torch.Tensor], targets: list[torch.Tensor]) -> float:
    total, count = 0.0, 0
    for doc_logits, doc_targets in zip(logits, targets):
        log_probs = torch.log_softmax(doc_logits.to("cpu", torch.float64), dim=-1)
        total -= float(log_probs.gather(1, doc_targets[:, None].cpu()).sum())
        count += doc_targets.numel()
    return total / count


def packed_matches_documents_alone(*, device: str, path: str | None = None, documents: int = 8, seq_len: int = 48,
                                   min_len: int = 4, max_len: int = 30, seed: int = 0,
                                   tolerance: dict | None = None) -> dict:
    """Pack `documents` random documents into rows of `seq_len` (runtime.data.pack_documents),
    run the packed batch once (forward and loss with document_ids), and run every document alone.

    Observations: max_abs_diff, max_abs_ref, allclose_ratio, nonfinite (packed vs alone logits of
    every document position), rtol, atol; loss (the packed batch's loss), reference_loss (float64
    mean cross-entropy of the documents alone), loss_abs_diff, loss_tol; documents, rows,
    documents_not_first_in_row (the documents a missing mask or position restart would corrupt);
    position_mismatches: positions the runtime gives the packed batch (model.attention_layout)
    that differ from 0, 1, 2, ... restarting at each document, counted here from the packing
    itself. RoPE scores depend on relative positions only, so with a correct mask a uniform
    shift inside a document leaves the logits unchanged: the restart is observed directly."""
    from pvlab.runtime import data, devices, model as runtime_model

    dev = torch_device(device)
    path = path or devices.default_path(dev)
    rtol, atol = rtol_atol(tolerance, "bfloat16" if path == "fast" else "float32")
    model = fixtures.random_model("tiny", seed=seed, initializer_range=0.1, device=str(dev), path=path)
    docs = _documents(model.config.vocab_size, documents, min_len, max_len, seed)
    rows = data.pack_documents(docs, seq_len=seq_len)
    batch = data.LMBatch.from_packed_rows(rows, width=seq_len).to(dev)
    packed_logits, alone_logits, alone_targets = [], [], []
    with torch.no_grad():
        logits = model(batch.inputs, document_ids=batch.document_ids)                    # (B, T, V)
        loss = float(model.loss(batch.inputs, batch.targets, document_ids=batch.document_ids))
        for r, row in enumerate(rows):
            start = 0
            for document in row:
                length = len(document) - 1
                packed_logits.append(logits[r, start:start + length])
                alone = torch.tensor([document[:-1]], device=dev)
                alone_logits.append(model(alone)[0])                                      # (n-1, V)
                alone_targets.append(torch.tensor(document[1:]))
                start += length
    positions, _ = runtime_model.attention_layout(batch.inputs, document_ids=batch.document_ids)
    expected_positions = torch.full(batch.inputs.shape, -1, dtype=torch.long)
    for r, row in enumerate(rows):
        start = 0
        for document in row:
            expected_positions[r, start:start + len(document) - 1] = torch.arange(len(document) - 1)
            start += len(document) - 1
    real = expected_positions >= 0
    if positions is None:   # the runtime saw no documents: every position runs on from the row's start
        positions = torch.arange(batch.inputs.shape[1]).expand(batch.inputs.shape)
    position_mismatches = int((positions.cpu()[real] != expected_positions[real]).sum())
    reference_loss = _float64_mean_cross_entropy(alone_logits, alone_targets)
    obs = compared(torch.cat(packed_logits), torch.cat(alone_logits), rtol=rtol, atol=atol)
    obs.update(loss=loss, reference_loss=reference_loss, loss_abs_diff=abs(loss - reference_loss),
               loss_tol=atol + rtol * abs(reference_loss), documents=len(alone_logits), rows=len(rows),
               documents_not_first_in_row=sum(len(row) - 1 for row in rows), position_mismatches=position_mismatches)
    return obs
