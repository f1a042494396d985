"""A contract's YAML, read once per content: the built data and the reading problems of a file,
remembered in pv.cache under the sha256 of its bytes (and the name it is shown by).

Composing and building YAML is most of what checking an unchanged contract costs once its other
facts are remembered (pv.cache): a `pv validate` after one edit among a thousand files would
otherwise parse the other 999 again. A remembered file comes back without its node tree: the
few whose diagnostics need a position compose it again (safe_yaml.LoadedContract.root).

The data is stored as JSON text with every container tagged (`{"d": [[key, value], ...]}` for a
mapping, so keys keep their type; `{"l": [...]}` for a sequence; `{"t": "YYYY-MM-DD"}` for a
date); a file whose data holds anything else (or a NaN, which would not read back equal) is
simply not remembered. Only files that read
cleanly into a LoadedContract are remembered: every refusal (size, binary, syntax, bombs) is
decided again each time.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path
from typing import Any

from pv.diagnostics import Diagnostic, Severity
from pv.safe_yaml import MAX_BYTES, LoadedContract, _read_regular, read_yaml

LOAD_FACTS_VERSION = "yaml-data-1"  # pv.cache: with pv's own source digest


class _Unrememberable(Exception):
    pass


def _encode(value: Any) -> Any:
    kind = type(value)
    if value is None or kind in (str, bool, int):
        return value
    if kind is float:
        if value != value:  # NaN: JSON has it, but it never equals itself, so the data would not read back equal
            raise _Unrememberable("nan")
        return value
    if kind is list:
        return {"l": [_encode(v) for v in value]}
    if kind is dict:
        return {"d": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if kind is datetime.date:
        return {"t": value.isoformat()}
    raise _Unrememberable(kind.__name__)


def data_digest(data: Any) -> str | None:
    """sha256 of the YAML data's exact encoding (the one remembered files are stored in), or None
    where it has none (a NaN, a type the encoding does not tag). Two files with the same digest
    read into the same data, whatever their comments and layout: a fact computed from the data
    alone (pv.replay's PV501 shares) can be keyed by it instead of the bytes."""
    try:
        return _digest_of_encoding(json.dumps(_encode(data), separators=(",", ":")))
    except (_Unrememberable, ValueError, TypeError, RecursionError):
        return None


def digest_of_loaded(loaded: LoadedContract) -> str | None:
    """data_digest of the loaded file's data: the digest read_yaml_remembered took of the encoding
    it stored or read back (the same text), else computed."""
    return loaded.data_sha256 if loaded.data_sha256 is not None else data_digest(loaded.data)


def _digest_of_encoding(encoded: str) -> str:
    return hashlib.sha256(encoded.encode()).hexdigest()  # ensure_ascii: ASCII


def _decode_tag(obj: dict) -> Any:
    if "d" in obj:
        return {k: v for k, v in obj["d"]}
    if "l" in obj:
        return obj["l"]
    if "t" in obj:
        return datetime.date.fromisoformat(obj["t"])
    raise ValueError("unknown tag")


def _text_of(raw: bytes) -> str:
    text = raw.decode("utf-8")
    return text[1:] if text.startswith("\ufeff") else text


def is_remembered(path: Path, display: str, store: Any) -> bool:
    """Whether `store` holds the YAML of the file's current bytes (read_yaml_remembered would not parse it)."""
    from pv.cache import key_of

    if not getattr(store, "active", True):
        return False
    try:
        raw = _read_regular(path)
    except OSError:
        return False
    return raw is not None and len(raw) <= MAX_BYTES and isinstance(store.get(key_of("yaml", raw, display)), dict)


def read_yaml_remembered(path: Path, display: str, store: Any) -> tuple[LoadedContract | None, list[Diagnostic]]:
    """safe_yaml.read_yaml, answered from `store` (a pv.cache.Cache) for bytes read before."""
    from pv.cache import key_of

    if not getattr(store, "active", True):  # PV_NO_CACHE=1: nothing to look up, nothing worth encoding
        return read_yaml(path, display)
    try:
        raw = _read_regular(path)
    except OSError:
        raw = None
    if raw is None or len(raw) > MAX_BYTES:
        return read_yaml(path, display)  # says what is wrong with it
    key = key_of("yaml", raw, display)
    found = store.get(key)
    if isinstance(found, dict):
        try:
            data = json.loads(found["data"], object_hook=_decode_tag)
            problems = [Diagnostic(path=d["path"], line=d["line"], col=d["col"], code=d["code"], message=d["message"],
                                   hint=d["hint"], severity=Severity(d["severity"])) for d in found["problems"]]
            loaded = LoadedContract(path=path, display_path=display, text=_text_of(raw),
                                    sha256=hashlib.sha256(raw).hexdigest(), data=data, contract=None,
                                    data_sha256=_digest_of_encoding(found["data"]))
            return loaded, problems
        except (KeyError, TypeError, ValueError, UnicodeDecodeError, RecursionError):
            pass
    loaded, problems = read_yaml(path, display)
    if loaded is None or loaded.sha256 != hashlib.sha256(raw).hexdigest():
        return loaded, problems  # refused, or the file changed between the two reads
    try:
        if loaded.text != _text_of(raw):
            return loaded, problems
        # exact by construction: plain types only, a tag for every container and date, no NaN
        encoded = json.dumps(_encode(loaded.data), separators=(",", ":"))
    except (_Unrememberable, ValueError, TypeError, RecursionError):
        return loaded, problems
    store.put(key, {"data": encoded, "problems": [d.to_json() for d in problems]})
    loaded.data_sha256 = _digest_of_encoding(encoded)
    return loaded, problems
