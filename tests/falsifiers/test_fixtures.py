"""pvlab.falsifiers.fixtures: checkpoint names, including a checkpoint given by its directory
(`pv run --subject-path DIR` passes the absolute directory as `checkpoint`)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from pvlab.falsifiers import fixtures  # noqa: E402


def test_an_existing_directory_is_a_checkpoint_name(tmp_path):
    assert fixtures.checkpoint_dir(str(tmp_path)) == tmp_path.resolve()


def test_an_unknown_name_or_missing_directory_is_refused(tmp_path):
    for name in ("no-such-checkpoint", str(tmp_path / "absent")):
        with pytest.raises(ValueError, match="unknown checkpoint"):
            fixtures.checkpoint_dir(name)


def test_a_checkpoint_without_its_training_recipe_says_so(tmp_path):
    """A plain HF checkpoint has no runtime.json: checks that score it on its training data
    ERROR with a message that says why (never a pass)."""
    fixtures.clear()
    with pytest.raises(FileNotFoundError, match="has no runtime.json"):
        fixtures.recipe(str(tmp_path))
