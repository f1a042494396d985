"""Generation refuses exactly the requests that would run past the model's context.

runtime.generate documents PromptTooLongError for a prompt longer than the context and for a
prompt plus max_new_tokens that exceeds it ("ask for at most context - len(prompt) new
tokens"). A decoder asked past the context does not crash on the CPU: rotary positions are
computed for any index, so the model quietly decodes at positions it was never trained on, and
a KV cache sized to the context is overrun. The limit is judged at its edge, on both sides: every
request that would pass the context must be refused with PromptTooLongError, and every request
that fits must run and give max_new_tokens tokens. Both generate and generate_batch are judged,
the cache on and off.

The oracle is the documented arithmetic, len(prompt) + max_new_tokens <= context, computed in the
check from the config's max_position_embeddings. Nothing of the runtime decides what is expected.
"""

from __future__ import annotations

import importlib


def _requests(context: int) -> list[tuple[int, int]]:
    """(prompt length, max_new_tokens) at and around the edge, and well inside it."""
    return [(context - 6, 6), (context - 6, 7), (context - 6, 0), (context - 1, 1), (context - 1, 2),
            (context, 0), (context, 1), (context + 1, 0), (8, 4)]


def context_limit_at_its_edge(*, device: str = "cpu", seed: int = 0) -> dict:
    """The tiny preset with random weights; each request of _requests through generate (cache on
    and off) and generate_batch (the request's prompt beside an 8-token one), eos disabled, greedy.

    Observations: cases; past_context (cases the documented arithmetic refuses); wrong_acceptances
    (refused by the arithmetic, but generated); wrong_refusals (fitting, but refused or raising);
    short_generations (fitting and run, with fewer than max_new_tokens new tokens); context."""
    if device != "cpu":
        raise ValueError(f"the request checks are host code; device {device!r} is not judged here")
    from . import fixtures

    generation = importlib.import_module("pvlab.runtime.generate")   # read at call time: planted bugs swap it
    errors = importlib.import_module("pvlab.runtime.errors")
    model = fixtures.random_model("tiny", seed=seed)
    context = model.config.max_position_embeddings
    vocab = model.config.vocab_size

    def prompt(length: int) -> list[int]:
        return [(7 * i + 3) % vocab for i in range(length)]

    def attempt(run, fits: bool, wanted: int) -> tuple[int, int, int]:
        """(wrong acceptance, wrong refusal, short generation) of one call."""
        try:
            out = run()
        except errors.PromptTooLongError:
            return 0, int(fits), 0
        except Exception:  # noqa: BLE001 - any other failure of a fitting request is a refusal it should not make
            return 0, 1, 0
        if not fits:
            return 1, 0, 0
        produced = [len(g.new_ids) for g in (out if isinstance(out, list) else [out])]
        return 0, 0, int(any(n < wanted for n in produced))

    cases = past = accepted = refused = short = 0
    for length, new in _requests(context):
        fits = length + new <= context
        calls = [lambda use_cache=use_cache: generation.generate(model, prompt(length), max_new_tokens=new,
                                                                 eos_token_id=None, use_cache=use_cache)
                 for use_cache in (True, False)]
        calls.append(lambda: generation.generate_batch(model, [prompt(length), prompt(8)], max_new_tokens=new,
                                                       eos_token_id=None))
        for run in calls:
            cases += 1
            past += not fits
            a, r, s = attempt(run, fits, new)
            accepted, refused, short = accepted + a, refused + r, short + s
    return {"cases": cases, "past_context": past, "wrong_acceptances": accepted, "wrong_refusals": refused,
            "short_generations": short, "context": context}
