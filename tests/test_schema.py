"""The schema: models are the source of truth; the committed JSON Schema is their export, and an
editor using it (yaml-language-server, via jsonschema here) agrees with pv."""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from pv_validate_ws import GOOD
from pv.schema import SCHEMA_PATH, Contract, json_schema, json_schema_text

REPO = Path(__file__).resolve().parent.parent


def as_editor_sees_it(data):
    """YAML as an editor's JSON view has it: dates are text."""
    if isinstance(data, dict):
        return {k: as_editor_sees_it(v) for k, v in data.items()}
    if isinstance(data, list):
        return [as_editor_sees_it(v) for v in data]
    if isinstance(data, (datetime.date, datetime.datetime)):
        return data.isoformat()
    return data


def good_data() -> dict:
    return yaml.safe_load(GOOD.format(schema="x"))


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def test_committed_schema_is_the_models_export():
    assert SCHEMA_PATH.read_text(encoding="utf-8") == json_schema_text(), (
        "pv/schema/contract.schema.json is stale: run `python -m pv.schema --write`")


def test_schema_declares_draft_2020_12():
    assert json_schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_json_schema_accepts_the_good_contract(validator):
    data = good_data()
    Contract.model_validate(data)
    assert list(validator.iter_errors(as_editor_sees_it(data))) == []


@pytest.mark.parametrize("mutate, where", [
    (lambda d: d["falsification_tests"][0].__setitem__("predicton", d["falsification_tests"][0].pop("prediction")),
     "misspelt key"),
    (lambda d: d.__setitem__("kani_harnesses", []), "unknown section"),
    (lambda d: d["metadata"].__setitem__("status", "DONE"), "unknown status"),
    (lambda d: d["metadata"].__setitem__("version", "1.0"), "bad semver"),
    (lambda d: d["falsification_tests"][0].__setitem__("devices", "cpu"), "wrong type"),
    (lambda d: d["falsification_tests"][0].__setitem__("devices", []), "no device"),
    (lambda d: d["falsification_tests"][0].__setitem__("check", "os.path:join()"), "bad check"),
    (lambda d: d["proof_obligations"][0].__setitem__("id", "FALSIFY-BND-001"), "obligation id with FALSIFY-"),
    (lambda d: d["falsification_tests"][0]["params"].__setitem__("nested", {"a": {"b": 1}}), "nested params"),
    (lambda d: d.__setitem__("falsification_tests", []), "no falsifier"),
])
def test_editor_and_pv_both_reject(validator, mutate, where):
    data = good_data()
    mutate(data)
    assert list(validator.iter_errors(as_editor_sees_it(data))), f"the JSON Schema accepts a {where}"
    with pytest.raises(Exception):
        Contract.model_validate(data)


def repo_contracts() -> list[Path]:
    return sorted((REPO / "contracts").glob("*.yaml"))


@pytest.mark.parametrize("path", repo_contracts(), ids=lambda p: p.name)
def test_editor_agrees_with_pv_on_repo_contracts(validator, path):
    """Whatever state a repository contract is in, the editor and pv give the same verdict."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    try:
        Contract.model_validate(data)
        pv_ok = True
    except Exception:  # noqa: BLE001
        pv_ok = False
    editor_errors = list(validator.iter_errors(as_editor_sees_it(data)))
    assert pv_ok == (not editor_errors), [e.message for e in editor_errors]


def test_definition_sha256_ignores_key_order():
    a = Contract.model_validate(good_data()).falsification_tests[0]
    data = good_data()
    data["falsification_tests"][0] = dict(reversed(list(data["falsification_tests"][0].items())))
    b = Contract.model_validate(data).falsification_tests[0]
    assert a.definition_sha256() == b.definition_sha256()
    changed = copy.deepcopy(good_data())
    changed["falsification_tests"][0]["prediction"] = "val_loss < 0.6 * ln(vocab_size)"
    assert Contract.model_validate(changed).falsification_tests[0].definition_sha256() != a.definition_sha256()


def test_definition_hash_covers_what_decides_the_verdict_and_nothing_else():
    from pv.schema import FalsificationTest

    base = FalsificationTest.model_validate({
        "id": "FALSIFY-X-001", "rule": "r", "prediction": "x < 1", "check": "falsifiers.x:f",
        "params": {"n": 1}, "devices": ["cpu"], "if_fails": "y",
        "tolerance": {"source": "measured", "float32": {"rtol": 1e-5, "atol": 1e-6}},
    })
    digest = base.definition_sha256()

    def changed(**update):
        return FalsificationTest.model_validate({**base.model_dump(mode="json"), **update}).definition_sha256()

    for decisive in ({"prediction": "x < 2"}, {"params": {"n": 2}}, {"check": "falsifiers.x:g"},
                     {"tolerance": {"source": "measured", "float32": {"rtol": 1e-4, "atol": 1e-6}}}):
        assert changed(**decisive) != digest, decisive
    for prose in ({"rule": "other words"}, {"if_fails": "elsewhere"}, {"mutants": ["some_bug"]},
                  {"ship_blocking": True}, {"devices": ["cpu", "cuda"]},
                  {"tolerance": {"source": "re-measured", "float32": {"rtol": 1e-5, "atol": 1e-6}}}):
        assert changed(**prose) == digest, prose


def test_changelog_dates_are_iso_days_only_through_the_api_too():
    """pv.safe_yaml keeps a non-ISO timestamp as text; a model built in Python can still be
    handed a datetime or a number, which lax pydantic would turn into a day."""
    import pydantic

    from pv.schema import ChangelogEntry

    ok = ChangelogEntry.model_validate({"version": "1.0.0", "date": "2026-11-22", "change": "c"})
    assert ok.date == datetime.date(2026, 11, 22)
    for bad, why in ((datetime.datetime(2026, 11, 22, 10), "is a timestamp"), (0, "is not a date"),
                     ("2026-11-22\n", "is not a date"), ("２０２６-１１-２２", "is not a date")):
        with pytest.raises(pydantic.ValidationError, match=why):
            ChangelogEntry.model_validate({"version": "1.0.0", "date": bad, "change": "c"})
