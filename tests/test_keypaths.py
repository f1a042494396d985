"""pv.keypaths: every named key path exists in the schema models and finds its value in a
real contract; a path the models do not have cannot even be named."""

from __future__ import annotations

from pathlib import Path

import pytest

from pv import keypaths as K
from pv.loader import load_contract

ROOT = Path(__file__).resolve().parents[1]
PATHS = {name: value for name, value in vars(K).items() if isinstance(value, K.KeyPath)}


def test_the_module_names_the_paths_the_checks_read():
    assert {"CONTRACT_ID", "PREDICTION", "CHECK", "PARAMS", "MUTANTS", "FORMULA", "DEPENDS_ON"} <= set(PATHS)


@pytest.mark.parametrize("parts, why", [
    (("falsification_tests", K.EACH, "predicton"), "is not a field"),
    (("metadata", "identifier"), "is not a field"),
    (("metadata", K.EACH), "not a list or mapping"),
    (("falsification_tests", "prediction"), "is not a field"),  # the list's index is missing
])
def test_a_path_the_models_do_not_have_is_refused_at_import(parts, why):
    with pytest.raises(AssertionError, match=why):
        K._path(*parts)


def test_positions_and_keys():
    assert K.PREDICTION.at(3) == ("falsification_tests", 3, "prediction")
    assert K.FORMULA.at("bound") == ("equations", "bound", "formula")
    assert K.CONTRACT_ID.at() == ("metadata", "id") and K.CONTRACT_ID.key == "id"
    assert str(K.MUTANTS) == "falsification_tests[].mutants"
    with pytest.raises(ValueError):
        K.PREDICTION.at(1, 2)


def test_every_path_finds_its_value_in_a_repository_contract():
    """Against data written by people (not the models): each path reads what the model reads."""
    loaded, problems = load_contract(ROOT / "contracts" / "apr-pretrain-cuda-forward-parity-v1.yaml")
    assert loaded is not None and loaded.contract is not None, problems
    contract = loaded.contract
    model_values = {
        "CONTRACT_ID": contract.metadata.id, "CONTRACT_VERSION": contract.metadata.version,
        "STATUS": contract.metadata.status.value, "FALSIFIER_ID": contract.falsification_tests[0].id,
        "PREDICTION": contract.falsification_tests[0].prediction, "CHECK": contract.falsification_tests[0].check,
        "PARAMS": contract.falsification_tests[0].params, "MUTANTS": contract.falsification_tests[0].mutants,
    }
    for name, expected in model_values.items():
        path = PATHS[name]
        loc = path.at(*([0] * path.parts.count(K.EACH)))
        assert loaded.value_at(loc) == expected, name
