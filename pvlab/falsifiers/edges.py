"""The runtime's argument domains at their edges: what `pv mutate` found no falsifier feeding.

Each check walks a table of boundary cases written here from the documented domain (a
docstring or error message of the runtime: "rank in [0, world_size)", "lr > 0, betas in
[0, 1)", "val_fraction in (0, 1)", "seed defaults to 0") and counts the cases the runtime
accepts or refuses against that table. The oracle is the table itself, independent of the
runtime's comparisons; for the sampler's seed the oracle is a second call with the documented
seed given explicitly, plus a draw with another seed that must differ (so the comparison has
the power to see a changed default).
"""

from __future__ import annotations



def accepted(refusal: type[Exception], call) -> tuple[bool, object]:
    """(True, result) when `call()` returns, (False, None) when it raises `refusal`; any other
    exception propagates (the check ERRORs: a crash is not a refusal)."""
    try:
        return True, call()
    except refusal:
        return False, None


def shard_rank_gate(*, device: str, num_items: int = 10, world_size: int = 3) -> dict:
    """runtime.distributed.shard_indices for every rank in [-2, world_size + 2): a rank outside
    [0, world_size) must be refused (ArgumentError), every rank inside accepted, and the accepted
    shards must be disjoint and cover range(num_items) (checked with Python sets).

    Observations: wrong_verdicts (ranks accepted or refused against the domain), overlap
    (items in two shards), uncovered (items in no shard)."""
    from pvlab.runtime import distributed
    from pvlab.runtime.errors import ArgumentError

    wrong, seen, overlap = 0, set(), 0
    for rank in range(-2, world_size + 2):
        inside = 0 <= rank < world_size
        ok, shard = accepted(ArgumentError, lambda: distributed.shard_indices(
            num_items, rank=rank, world_size=world_size, seed=3, epoch=1))
        wrong += ok != inside
        if ok and inside:
            overlap += len(seen & set(shard))
            seen |= set(shard)
    return {"wrong_verdicts": wrong, "overlap": overlap, "uncovered": len(set(range(num_items)) - seen)}


# (keyword arguments of Trainer, expected to be accepted): the documented domain at its edges
_TRAINER_CASES = (
    ({"lr": 0.0}, False), ({"lr": -1e-3}, False), ({"lr": 1e-12}, True),
    ({"weight_decay": 0.0}, True), ({"weight_decay": -1e-9}, False),
    ({"betas": (0.0, 0.0)}, True), ({"betas": (0.999, 0.5)}, True),
    ({"betas": (1.0, 0.9)}, False), ({"betas": (0.9, 1.0)}, False), ({"betas": (-0.1, 0.9)}, False),
    ({"micro_batch_size": 0}, False), ({"micro_batch_size": -1}, False),
    ({"micro_batch_size": 1}, True), ({"micro_batch_size": None}, True),
)


def trainer_settings_domain(*, device: str) -> dict:
    """runtime.trainer.Trainer built on the random tiny model with each case of a table of
    boundary settings (lr = 0 refused, lr > 0 accepted; betas in [0, 1): 0 accepted, 1 refused;
    weight_decay >= 0; micro_batch_size positive or None): each must be accepted or refused
    (ArgumentError) as the table says.

    Observations: cases, wrong_verdicts, wrong (the first few cases judged wrongly)."""
    from pvlab.runtime.errors import ArgumentError
    from pvlab.runtime.trainer import Trainer

    from . import fixtures

    model = fixtures.fresh_copy(fixtures.random_model("tiny"))
    wrong = []
    for settings, expected in _TRAINER_CASES:
        ok, _ = accepted(ArgumentError, lambda: Trainer(model, **settings))
        if ok != expected:
            wrong.append(f"{settings} {'accepted' if ok else 'refused'}")
    return {"cases": len(_TRAINER_CASES), "wrong_verdicts": len(wrong), "wrong": wrong[:4]}


def split_fraction_domain(*, device: str) -> dict:
    """runtime.data.split_documents with val_fraction at the edges of (0, 1): 0 and 1 (and
    beyond) refused with DataError, 1e-6 and 0.999999 accepted; an accepted split holds out at
    least one document and trains on at least one, and together they are the distinct documents.

    Observations: wrong_verdicts, bad_splits (accepted splits that lose, duplicate or empty a side)."""
    from pvlab.runtime import data
    from pvlab.runtime.errors import DataError

    documents = [f"document {i}: " + "word " * i for i in range(8)]
    wrong = bad = 0
    for fraction, expected in ((0.0, False), (1.0, False), (-0.1, False), (1.5, False),
                               (1e-6, True), (0.5, True), (0.999999, True)):
        ok, split = accepted(DataError, lambda: data.split_documents(documents, val_fraction=fraction, seed=5))
        wrong += ok != expected
        if ok:
            train, held_out = split
            bad += not train or not held_out or sorted(train + held_out) != sorted(documents)
    return {"wrong_verdicts": wrong, "bad_splits": bad}


def sampling_default_seed(*, device: str, max_new_tokens: int = 24, temperature: float = 1.5) -> dict:
    """generate, generate_batch and generate_text of the trained tiny model, sampling at
    `temperature` without a seed, must produce what they produce with the documented default
    seed=0 given explicitly; with seed=1 the sample must differ (otherwise the comparison could
    not see a changed default).

    A plain call (no output_logits) of generate and generate_batch must keep no logits.

    Observations: default_mismatches (entry points whose seedless sample differs from seed=0),
    seed_insensitive (entry points whose seed=1 sample equals seed=0's), logits_kept_by_default."""
    import importlib

    from . import fixtures

    generate = importlib.import_module("pvlab.runtime.generate")   # the module (the package re-exports the function)

    model = fixtures.model("tiny-trained", "cpu", "reference")
    tokenizer = fixtures.tokenizer("tiny-trained")
    prompt = tokenizer.encode("def add(a, b):").ids
    common = {"max_new_tokens": max_new_tokens, "temperature": temperature}
    runs = {
        "generate": lambda **seed: generate.generate(model, prompt, **common, **seed).new_ids,
        "generate_batch": lambda **seed: [g.new_ids for g in generate.generate_batch(
            model, [prompt, prompt[:3]], **common, **seed)],
        "generate_text": lambda **seed: generate.generate_text(
            model, tokenizer, "def add(a, b):", stop_at_eos=False, **common, **seed),
    }
    mismatches = insensitive = 0
    for run in runs.values():
        documented = run(seed=0)
        mismatches += run() != documented
        insensitive += run(seed=1) == documented
    # output_logits defaults to False: a plain call keeps no logits (memory grows with every step otherwise)
    kept = [generate.generate(model, prompt, max_new_tokens=2).logits is not None,
            any(g.logits is not None for g in generate.generate_batch(model, [prompt], max_new_tokens=2))]
    return {"default_mismatches": mismatches, "seed_insensitive": insensitive, "logits_kept_by_default": sum(kept)}
