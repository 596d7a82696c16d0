"""Several cores in bench/: the burst targets (bench/targets.py) judged from the burst table's rows,
and the per-core figures of the budgeted `serve --workers N` rows (bench/cores.py), on rows made
by hand (no servers)."""

from __future__ import annotations

import dataclasses

from bench import cores, report, targets
from bench.scenarios import Measured
from bench.stats import Row, skipped


def row(system: str, tps: float, p50: float, p99: float, *, concurrency: int = 256,
        delay: float = 20.0, tokens: int = 256, rps: float = 0.0,
        ticks: dict[str, int] | None = None, total: int = 0) -> Row:
    base = skipped(system, concurrency, delay, tokens, "made by hand")
    return dataclasses.replace(base, tps=tps, rps=rps, errors=0, total_tokens=total,
                               ttft_ms={"p50": p50, "p95": p99, "p99": p99},
                               cpu_ticks=ticks or {}, upstream={})


def test_the_burst_targets_are_judged_on_the_store_on_row_against_direct() -> None:
    rows = [row("direct", 12800, 2.0, 20.0), row("responses", 12000, 90.0, 300.0),
            row("responses-store", 12700, 11.5, 75.0)]
    found = {t.name.split(": ", 1)[1]: t for t in targets.burst(rows)}
    assert set(found) == {"TTFT p50 <= direct + 10 ms", "TTFT p99 <= direct + 50 ms",
                          "tokens/s >= 0.99 x direct"}
    # only the store-on row is judged (the target), each against the direct row
    assert all([c.row for c in t.checks] == ["responses-store 256x20ms"] for t in found.values())
    assert found["TTFT p50 <= direct + 10 ms"].met  # +9.5 ms
    assert not found["TTFT p99 <= direct + 50 ms"].met  # +55 ms
    lines = report.targets_lines(targets.burst(rows))
    assert any(line.startswith("- **met**") and "tokens/s >= 0.99" in line for line in lines)


def test_a_burst_target_misses_by_what_it_missed_and_without_direct_is_not_measured() -> None:
    rows = [row("direct", 12800, 2.0, 20.0), row("responses-store", 12500, 40.0, 120.0)]
    p50, p99, ratio = targets.burst(rows)
    assert (p50.met, p99.met, ratio.met) == (False, False, False)
    assert p50.checks[0].miss == "+28.0 ms" and p99.checks[0].miss == "+50.0 ms"
    assert ratio.checks[0].value == "0.977x direct"
    assert all(not t.measured for t in targets.burst(rows[1:]))


def test_streams_per_core_follow_from_cpu_per_thousand_tokens() -> None:
    # 40 ms per 1k tokens: 25,000 tokens per core-second; a 20 ms/token stream takes 50 a
    # second, so 500 streams; at 100 ms/token, 2,500.
    assert cores.tokens_per_core_second(40.0) == 25_000
    assert cores.streams_per_core(40.0, 20.0) == 500
    assert cores.streams_per_core(40.0, 100.0) == 2_500
    assert cores.streams_per_core(None, 20.0) is None
    assert cores.check_streams(40.0, 20.0, 0.2) == 100  # what a 0.2-core budget should carry
    assert cores.check_streams(0.001, 20.0, 0.2) == cores.CHECK_MAX_STREAMS


def measured(label: str, r: Row, table: str = "budgeted") -> Measured:
    return Measured(table, label, r)


def test_the_per_core_table_divides_by_the_budgeted_cores() -> None:
    # 100 ticks = 1 CPU-second for 25,000 tokens: 40 ms per 1k (proxy), Redis 10 ticks more.
    stream = row("responses-store", 1600, 3.0, 9.0, concurrency=32, total=25_000,
                 ticks={"proxy": 100, "redis": 10})
    short = row("responses-store", 0, 20.0, 40.0, concurrency=64, delay=0.0, tokens=16, rps=160)
    check = row("responses-store", 4900, 3.0, 9.0, concurrency=100, total=25_000)
    check.tps_ratio = 0.995
    rows = [measured("b1", short), measured("b1", stream), measured("b1", check, "cores-check")]
    lines = cores.per_core_table(rows, 0.2)
    # 160 req/s on 0.2 core = 800 per core; 25,000 tokens per core-second (+ Redis: 22,727);
    # 500 streams per core (+ Redis 455); the check row's streams and x direct
    assert "| responses-store | 1 | 800 | 25000 | 22727 | 500 | 455 | 100 streams: 0.995 |" \
        in lines
