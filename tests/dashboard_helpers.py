"""Shared by the dashboard tests: a workspace whose ledger holds one real PASS record of a
falsifier, then that record planted again over ten commits with a margin that falls
(1.0, 0.9, ..., 0.1) — or, for the control, one that wobbles without a trend. And a small PNG
reader (no imaging library in the test extra) to inspect a browser's screenshot."""

from __future__ import annotations

import json
import struct
import uuid
import zlib
from pathlib import Path

from pv_workspace import cli, falsifier, make_workspace

SHRINKING = [round(1.0 - 0.1 * i, 3) for i in range(10)]  # 1.0 ... 0.1 over ten commits
STEADY = [1.0, 1.1, 0.95, 1.05, 1.0, 1.1, 0.98, 1.02, 1.0, 1.05]


def planted_workspace(tmp_path: Path, monkeypatch, margins: list[float]):
    ws = make_workspace(tmp_path)
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001", mutants=["drops_bias"]),
                             falsifier("FALSIFY-DEMO-002", prediction="val_loss < 10")])
    ws.enter(monkeypatch)
    run = cli("run")("--contract", "demo", "--device", "cpu")
    assert run.exit_code == 0, run.output
    lines = ws.ledger.read_text().splitlines()
    real = json.loads(next(line for line in lines if '"FALSIFY-DEMO-001"' in line))
    planted = []
    for i, margin in enumerate(margins):
        record = dict(real, margin=margin, git_commit=f"{i + 1:040x}", record_id=uuid.uuid4().hex,
                      run_id=uuid.uuid4().hex, observations=dict(real["observations"], val_loss=4.852 - margin))
        planted.append(json.dumps(record, sort_keys=True))
    ws.ledger.write_text("\n".join(lines + planted) + "\n")
    return ws


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit, non-interlaced RGB or RGBA PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, chunks, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b = previous[x]
            c = previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + a) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + b) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, [bytes(r) if channels == 3 else bytes(v for i, v in enumerate(r) if i % 4 != 3)
                           for r in rows]


def count_colour(rows: list[bytes], rgb: tuple[int, int, int], tolerance: int = 6) -> int:
    count = 0
    for row in rows:
        for x in range(0, len(row), 3):
            if all(abs(row[x + i] - rgb[i]) <= tolerance for i in range(3)):
                count += 1
    return count
