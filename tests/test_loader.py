"""pv.loader: load_contract = safe YAML + the schema, errors placed at their line:col."""

from __future__ import annotations

import time

import pytest

from pv.loader import load_contract
from test_safe_yaml import only_code, write


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "--- \n...\n"])
def test_empty_documents_are_pv106(tmp_path, text):
    loaded, problems = load_contract(write(tmp_path, text), "c.yaml")
    assert only_code(problems) == "PV106"


def test_load_contract_keeps_the_text_and_sha(tmp_path):
    import hashlib

    path = write(tmp_path, "a: 1\n")
    loaded, _ = load_contract(path, "c.yaml")
    assert loaded.text == "a: 1\n" and loaded.sha256 == hashlib.sha256(b"a: 1\n").hexdigest()

def test_thousand_loads_are_quick(tmp_path):
    """The loader's share of the 1,000-contract budget (2 s for all of pv validate)."""
    import gc

    from pv_validate_ws import GOOD

    path = write(tmp_path, GOOD.format(schema="x"))
    load_contract(path, "c.yaml")
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(1000):
            load_contract(path, "c.yaml")
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    # About 0.5 s on an idle 2-core machine; the bound only catches a collapse (the pure-Python
    # composer, a per-file schema rebuild), not noise from a busy machine.
    assert elapsed < 10.0, f"{elapsed:.2f} s for 1,000 loads"
