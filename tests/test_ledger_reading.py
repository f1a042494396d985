"""Reading a ledger line: the depth guard (pv.ledger._depth, parse_line) against its slow
definitions, and pydantic reading a line at once (pv.ledger._read_at_once) against json + the
depth guard + the model. Split out of tests/test_ledger.py, which had reached 600 lines."""

from __future__ import annotations

import json

import pytest

from pv import ledger
from test_ledger import record


@pytest.mark.parametrize("raw, depth", [(b'[[],[]]', 2), (b'{"a":[1],"b":[[1]]}', 3), (b'{"s":"[[[["}', 1),
                                        (b'{"s":"\\"[["}', 1), (b'[' * 3 + b']' * 3 + b'[' * 2 + b']' * 2, 3),
                                        # an escape ends after one character: the string closes, and counting resumes
                                        (b'{"s":"a\\"b","t":[[1]]}', 3), (b'{"s":"\\\\","t":[1]}', 2)])
def test_the_nesting_scanner_measures_the_deepest_point_after_siblings_close(raw, depth):
    assert ledger._depth(raw) == depth


def _reference_depth(raw: bytes) -> int:
    """The byte-by-byte scan ledger._depth replaced: the oracle for its regex + running sum."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def test_the_nesting_scanner_agrees_with_a_byte_by_byte_scan_on_random_text():
    import random

    rng = random.Random(29)
    alphabet = b'[]{}"\\ax\r\t\x00\xff'  # brackets, quotes, escapes, unterminated strings, odd bytes
    for _ in range(20_000):
        raw = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert ledger._depth(raw) == _reference_depth(raw), raw


def _measured_first(raw: bytes):
    """What parse_line did before it decoded first: measure the text's depth, then decode."""
    if ledger._depth(raw) > ledger.MAX_DEPTH:
        raise ledger.TooDeep(f"nested more than {ledger.MAX_DEPTH} levels deep; no record is")
    return json.loads(raw)


def _outcome(parse, raw: bytes):
    try:
        return "value", parse(raw)
    except Exception as exc:  # noqa: BLE001 - the kind and the words are what is compared
        return type(exc).__name__, str(exc)


def test_decoding_first_finds_what_measuring_first_finds_on_random_lines():
    """A line of up to DECODE_FIRST_BRACKETS brackets is decoded, then its containers measured:
    the same value, the same garbage (too deep, also when broken) and the same decoder error as
    measuring the text first, on UTF-8, with a BOM, and in UTF-16 (which is measured first)."""
    import random

    rng = random.Random(29)
    atoms = [b'1', b'"a"', b'"[[{"', b'"\\\\"', b'"\\"[{"', b'null', b'NaN', b'"\xff"', b'"\xc3\xa9"', b'"\\u0000"']

    def value(depth: int) -> bytes:
        roll = rng.random()
        if depth > 22 or roll < 0.25:
            return rng.choice(atoms)
        items = [value(depth + 1) for _ in range(rng.randint(0, 3))]
        if roll < 0.6:
            return b"[" + b",".join(items) + b"]"
        return b"{" + b",".join(b'"k%d":%s' % (i, item) for i, item in enumerate(items)) + b"}"

    kinds = set()
    for _ in range(6_000):
        raw, roll = value(0), rng.random()
        if roll < 0.15 and raw:
            cut = rng.randrange(len(raw))
            raw = raw[:cut] + raw[cut + 1:]  # broken JSON, deep or not
        elif roll < 0.2:
            raw = b"\xef\xbb\xbf" + raw
        elif roll < 0.25:
            raw = raw.decode("utf-8", "replace").encode("utf-16")
        expected = _outcome(_measured_first, raw)
        assert _outcome(ledger.parse_line, raw) == expected, raw
        kinds.add(expected[0])
    assert {"value", "TooDeep", "JSONDecodeError"} <= kinds
    for width in (ledger.MAX_DEPTH, ledger.MAX_DEPTH + 1, ledger.DECODE_FIRST_BRACKETS + 1):
        for raw in (b"[" * width + b"]" * width, b"[" * width):
            assert _outcome(ledger.parse_line, raw) == _outcome(_measured_first, raw)


def _typed(value):
    """A value with the type of every part written out: 1 and 1.0, -0.0 and 0.0, key order differ."""
    if isinstance(value, dict):
        return "dict", [(key, _typed(item)) for key, item in value.items()]
    if isinstance(value, list):
        return "list", [_typed(item) for item in value]
    return type(value).__name__, repr(value)


def _read_carefully(raw: bytes):
    """How a line was read before pydantic read it at once: json (with the depth guard), then the model."""
    return ledger.LedgerRecord.model_validate(ledger.parse_line(raw))


def _record_outcome(read, raw: bytes):
    kind, value = _outcome(read, raw)
    if kind != "value":
        return kind, value
    return kind, _typed(dict(value)), sorted(value.model_fields_set)


def _edge_lines(line: bytes) -> list[bytes]:
    """A record's line damaged or stretched at every place the two readers could part."""
    import random

    rng = random.Random(29)
    text = line.decode()
    lines = [line, line + b"\r", b" " + line + b" ", b"\xef\xbb\xbf" + line, line + b"\x00", line[:-1],
             line.replace(b'"PASS"', b'"pass"'), line.replace(b'"verdict"', b'"verdict": "FAIL", "verdict"'),
             line.replace(b"{", b'{"unknown": 1, ', 1), line.replace(b'"schema_version": 7', b'"schema_version": 7.0'),
             line.replace(b'"schema_version": 7', b'"schema_version": "7"'),
             line.replace(b'"schema_version": 7', b'"schema_version": true')]
    for atom in (b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-0", b"-0.0", b"01", b".5", b"1.", b"+1", b"5e-324",
                 b"12345678901234567890123", b"0.1000000000000000055511151231257827", b'"\\ud800"', b'"\\udc00\\ud800"',
                 b'"\xff"', b'"\xed\xa0\x80"', b'"a\x01b"', b'"a\tb"', b'"\\u0000"', b'"\xc3\xa9"', b"[1,]", b"{}",
                 b'{"k": 1, "k": 2}', b"[" * 14 + b"1" + b"]" * 14, b"[" * 15 + b"1" + b"]" * 15,
                 b"[" * 16 + b"1" + b"]" * 16, b"[" * 300 + b"]" * 300,
                 b"[" + b"[1]," * 600 + b"[1]]", b"[" * 600):
        lines.append(line.replace(b'"observations": {', b'"observations": {"edge": ' + atom + b", ", 1))
        lines.append(line.replace(b'"message": "', b'"message": ' + atom + b', "was": "', 1))
        lines.append(line.replace(b'"margin": ', b'"margin": ' + atom + b', "was": ', 1))
    for _ in range(300):  # a byte lost, doubled or changed anywhere
        at, roll = rng.randrange(len(text)), rng.random()
        middle = b"" if roll < 0.4 else line[at:at + 1] * 2 if roll < 0.7 else bytes([rng.randrange(256)])
        lines.append(line[:at] + middle + line[at + 1:])
    return lines


def test_reading_a_line_at_once_reads_what_json_and_the_model_read():
    """parse_record lets pydantic read a line's bytes at once (pv.ledger._read_at_once) and falls
    back to json + the depth guard + the model where it refuses: the same record (every value's
    type and key order too) or the same error, on every line of this repository's ledger and on
    lines damaged at every place the two readers could part."""
    from pathlib import Path

    ledger_path = Path(__file__).resolve().parent.parent / "evidence" / "ledger.jsonl"
    lines = [raw for raw in ledger_path.read_bytes().split(b"\n") if raw.strip()]
    assert len(lines) > 1_000
    read_at_once = 0
    for raw in lines:
        assert _record_outcome(ledger.parse_record, raw) == _record_outcome(_read_carefully, raw), raw[:200]
        read_at_once += ledger._read_at_once(raw) is not None
    assert read_at_once == len(lines)  # the fast way read every well-formed line
    line = record(1, judged_params={"p": [1, 2.0]}, message="m").to_line().rstrip(b"\n")
    kinds = set()
    for raw in _edge_lines(line):
        expected = _record_outcome(_read_carefully, raw)
        assert _record_outcome(ledger.parse_record, raw) == expected, raw
        kinds.add(expected[0] if expected[0] != "value" or ledger._read_at_once(raw) is None else "read at once")
    assert {"read at once", "value", "TooDeep", "JSONDecodeError", "ValidationError", "UnicodeDecodeError"} <= kinds
