"""`python -m bench.burstsetup` end to end, small: every system's bursts are measured (no
stream lost, a CPU figure for every proxied system), and the floor holds its place: a
`/healthz` answer costs the proxy less than a stored stream's set-up, and the Redis beside it
works for the stored set-up (the create) and not for `/healthz`."""

from __future__ import annotations

import pytest

from bench.burstsetup import KINDS, run, table

pytestmark = [pytest.mark.e2e, pytest.mark.bench_rows]


def test_every_system_is_measured_and_healthz_is_the_floor() -> None:
    results = run(streams=32, bursts=3, gap_ms=400, kinds=KINDS)
    assert [r.kind for r in results] == list(KINDS)
    for result in results:
        assert len(result.bursts) == 2
        assert all(b.p50_ms > 0 and b.p99_ms >= b.p50_ms for b in result.bursts)
    by_kind = {r.kind: r for r in results}
    assert by_kind["healthz"].median("cpu_us") < by_kind["responses-store"].median("cpu_us")
    assert by_kind["healthz"].median("redis_us") < by_kind["responses-store"].median("redis_us")
    assert len(table(results, 32)) == 2 + len(KINDS)
