"""pvpack.checks.evaluation's fixtures: the short batch of token_weighting (hardest_targets)."""

import torch

from pvpack.checks.evaluation import hardest_targets
from pvpack.protocol import IGNORE_INDEX


def _nll(logits, targets):
    return torch.logsumexp(logits.double(), -1) - logits.double().gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)


def test_each_row_keeps_exactly_its_worst_predicted_targets():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 16, 11, generator=generator)
    targets = torch.randint(0, 11, (3, 16), generator=generator)
    kept = hardest_targets(logits, targets, keep=4)
    losses = _nll(logits, targets)
    for row in range(3):
        scored = kept[row] != IGNORE_INDEX
        assert int(scored.sum()) == 4
        assert torch.equal(kept[row][scored], targets[row][scored])          # kept targets unchanged
        assert float(losses[row][scored].min()) >= float(losses[row][~scored].max())


def test_unscored_targets_stay_unscored_and_a_short_row_keeps_what_it_has():
    logits = torch.randn(2, 6, 5, generator=torch.Generator().manual_seed(1))
    targets = torch.tensor([[1, 2, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX],
                            [IGNORE_INDEX] * 6])
    kept = hardest_targets(logits, targets, keep=3)
    assert torch.equal(kept[0][:2], targets[0][:2]) and bool((kept[0][2:] == IGNORE_INDEX).all())
    assert bool((kept[1] == IGNORE_INDEX).all())


def test_the_kept_quarter_is_far_harder_than_the_whole_batch():
    """What the fixture is for: a mean of batch means and the token-weighted mean differ by far
    more than token_weighting's 1e-2 separation bound, even where the model is uniformly good."""
    generator = torch.Generator().manual_seed(2)
    targets = torch.randint(0, 50, (4, 64), generator=generator)
    logits = torch.randn(4, 64, 50, generator=generator)
    logits.scatter_add_(-1, targets[..., None], torch.full((4, 64, 1), 3.0))  # a model that is mostly right
    losses = _nll(logits, targets)
    kept = hardest_targets(logits, targets, keep=16)
    short = losses[kept != IGNORE_INDEX].mean()
    weighted = (losses.sum() + losses[kept != IGNORE_INDEX].sum()) / (losses.numel() + 64)
    batch_mean = (losses.mean() + short) / 2
    assert float(abs(batch_mean - weighted) / weighted) > 0.1
