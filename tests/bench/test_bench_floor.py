"""`python -m bench.floor`, tiny, as `make bench` runs it (a child process: the yardstick runs
its own event loops and relay processes): every relay shape passes every stream's chunks on.
What the load counts is what came out of the relay, so a shape that dropped or never relayed
chunks shows a rate far below the 16 x 50 chunks/s sent. Sixteen streams for two seconds, not
fewer: the relay's CPU is read from /proc in 10 ms ticks, and the cheapest shape spends ~20 µs
a chunk, so a smaller load can round to zero ticks (it did, on a quiet CI machine)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.floor import SHAPES

pytestmark = [pytest.mark.e2e, pytest.mark.bench_rows]


def test_each_shape_relays_every_stream() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.floor", "--streams", "16", "--seconds", "2",
         "--rounds", "1"], capture_output=True, text=True, timeout=90, check=True).stdout
    rows = {line.split("|")[1].strip(): line.split("|") for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| shape")}
    assert set(rows) == set(SHAPES), out
    for shape, cells in rows.items():
        rate = float(cells[4])
        assert 480 <= rate <= 840, (shape, out)  # 800 sent, less what a loaded machine delays
        assert float(cells[5]) > 0, (shape, out)  # the relay's CPU per chunk was measured
