"""`python -m bench.scriptcalls` end to end, tiny: every cell is measured and printed, and a
coalesced burst costs the client less per call than the same calls sent alone (a burst of 256
in one pipeline against 256 lone round trips: several times apart, not a close call)."""

from __future__ import annotations

import pytest

from bench.scriptcalls import CONCURRENCY, WAYS, run, table

pytestmark = [pytest.mark.e2e, pytest.mark.bench_rows]


def test_every_cell_is_measured_and_a_coalesced_burst_is_cheaper() -> None:
    results = run(calls=512, rounds=1, size=100)
    assert set(results) == {(way, c) for way in WAYS for c in CONCURRENCY}
    assert results[("coalesced", 256)][1] < results[("alone", 256)][1]
    lines = table(results)
    assert len(lines) == 2 + len(WAYS) * len(CONCURRENCY)
