"""pvpack.checks.batching: the rows of a batch are independent, on pvlab's runtime and on
transformers (tiny-trained, CPU), and three defects that mix rows, planted in transformers' own
code, are reported. Each is invisible to a batch of one row (asserted too): the scale most tests
run at."""

from __future__ import annotations

import pytest
import torch

from pvpack.checks import batching

CALL = dict(device="cpu", subject="tiny-trained", rows=4)


def holds(seen: dict) -> bool:
    """FALSIFY-INDEPENDENT-ROWS-001's prediction."""
    return (seen["alone_max_abs_diff"] <= seen["tol"] and seen["reordered_max_abs_diff"] <= seen["tol"]
            and seen["rows_differing"] == 0 and seen["distinct_rows"] == seen["rows"] and seen["rows"] >= 4)


def test_rotated_moves_every_row():
    order = batching.rotated(5)
    assert sorted(order.tolist()) == [0, 1, 2, 3, 4] and all(int(order[i]) != i for i in range(5))


def test_a_batch_of_one_is_refused():
    with pytest.raises(ValueError, match="at least 2"):
        batching.rows_are_independent(runtime="pvlab", device="cpu", subject="tiny-trained", rows=1)


@pytest.mark.parametrize("path", ["reference", "fast"])
@pytest.mark.parametrize("runtime", ["pvlab", "transformers"])
def test_independent_rows_pass(runtime, path):
    seen = batching.rows_are_independent(runtime=runtime, path=path, **CALL)
    assert holds(seen), seen


def _single_row_unchanged(defect) -> None:
    """The defect changes nothing for a batch of one row (so a test at batch size 1 passes)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1)).eval()
    ids = torch.randint(0, 32, (1, 9))
    with torch.no_grad():
        clean = model(ids).logits
        with defect():
            planted = model(ids).logits
    assert torch.allclose(clean, planted, rtol=1e-5, atol=1e-6)


def _patched(owner, name, new):
    import contextlib

    @contextlib.contextmanager
    def planted():
        original = getattr(owner, name)
        setattr(owner, name, new(original))
        try:
            yield
        finally:
            setattr(owner, name, original)
    return planted


def _rows_sorted_and_never_put_back():
    """The rows sorted for the forward (as a length-bucketing eval sorts them) and their logits
    returned in the sorted order. (Position ids counted over the flattened batch, the other
    classic, is benign here and not planted: rotary embeddings are relative, so a whole row
    shifted by b*T positions moved the tiny subject's logits by 2.7e-5, inside the bound.)"""
    from transformers.models.qwen2 import modeling_qwen2

    def new(original):
        def forward(self, input_ids=None, *args, **kwargs):
            order = torch.argsort(input_ids[:, 0], stable=True) if input_ids is not None else None
            return original(self, input_ids[order] if order is not None else input_ids, *args, **kwargs)
        return forward
    return _patched(modeling_qwen2.Qwen2ForCausalLM, "forward", new)


def _norm_statistic_over_rows():
    """RMSNorm's mean square taken over the rows as well as the channels (a reduction over the
    wrong axes)."""
    from transformers.models.qwen2 import modeling_qwen2

    def new(original):
        def forward(self, hidden_states):
            dtype = hidden_states.dtype
            h = hidden_states.to(torch.float32)
            variance = h.pow(2).mean(dim=(0, -1), keepdim=True)
            return self.weight * (h * torch.rsqrt(variance + self.variance_epsilon)).to(dtype)
        return forward
    return _patched(modeling_qwen2.Qwen2RMSNorm, "forward", new)


def _keys_of_the_next_row():
    """Attention reads its keys and values from the next row's slot (a cache or buffer indexed by
    the wrong row)."""
    from transformers.models.qwen2 import modeling_qwen2

    def new(original):
        def eager(module, query, key, value, attention_mask, **kwargs):
            return original(module, query, key.roll(1, dims=0), value.roll(1, dims=0), attention_mask, **kwargs)
        return eager
    return _patched(modeling_qwen2, "eager_attention_forward", new)


@pytest.mark.parametrize("defect", [_rows_sorted_and_never_put_back, _norm_statistic_over_rows, _keys_of_the_next_row])
def test_a_defect_that_mixes_rows_is_reported_and_a_batch_of_one_hides_it(defect):
    planted = defect()
    _single_row_unchanged(planted)
    with planted():
        seen = batching.rows_are_independent(runtime="transformers", path="reference", **CALL)
    assert not holds(seen), seen
    assert seen["rows_differing"] >= 1 and seen["alone_max_abs_diff"] > 100 * seen["tol"], seen
