"""From one row's raw samples and CPU counters to the numbers in the table.

Per row (`loadgen.py` explains the window):
  - requests/s: requests that ended inside the window / window seconds;
  - tokens/s: content deltas received inside the window / window seconds;
  - TTFT p50/p95/p99 and total latency p50/p99, in ms, over the requests that *started* inside
    the window and succeeded (first content delta, resp. last byte, minus the request's write);
  - proxy CPU ms per 1,000 tokens: the proxy process's utime+stime over the whole row (from
    before the first request to after the last one), divided by every token the row streamed.
    `proxy_cpu_ticks` keeps the raw count: below ~20 ticks (200 ms) the figure is coarse;
  - core busy %: each core's busy share of the window (`/proc/stat`), to show which side
    saturated; the load generator's own CPU per 1,000 tokens shows what the harness costs;
  - others %: per group of cores, the busy time our pinned processes did not spend there
    (someone else's work on the machine), so a disturbed row can be seen and run again;
  - errors: every failed request of the row, ramp and drain included, by reason;
  - against `direct` of the same cell: tokens/s ratio and TTFT p50 difference in ms.
Percentiles interpolate linearly between order statistics (numpy's default "linear" method).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.loadgen import RowRun, Sample
from bench.procs import CLK_TCK


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) of `values`, or None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Mark:
    """CPU counters read at one instant: ticks per process, (busy, total) jiffies per core."""

    ticks: dict[str, int]
    cores: dict[int, tuple[int, int]]


# Which cores each group of our processes is pinned to: {"proxy core": ([0], ("proxy",)), ...}
Groups = dict[str, tuple[list[int], tuple[str, ...]]]


def others_percent(first: Mark, last: Mark, seconds: float, groups: Groups) -> dict[str, float]:
    """Per group of cores: busy time not spent by our processes pinned there, in % of one core
    (other work on the machine, plus kernel time not charged to a process: a few %)."""
    out: dict[str, float] = {}
    for name, (cores, procs) in groups.items():
        busy = sum(last.cores[c][0] - first.cores[c][0] for c in cores if c in last.cores
                   and c in first.cores)
        ours = sum(last.ticks.get(p, 0) - first.ticks.get(p, 0) for p in procs)
        out[name] = max(0.0, 100.0 * (busy - ours) / CLK_TCK / max(seconds, 1e-9))
    return out


def busy_percent(first: Mark, last: Mark) -> dict[int, float]:
    out: dict[int, float] = {}
    for core, (busy1, total1) in last.cores.items():
        busy0, total0 = first.cores.get(core, (busy1, total1))
        out[core] = 100.0 * (busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0
    return out


@dataclass
class Row:
    system: str
    concurrency: int
    delay_ms: float
    tokens: int
    window_s: float
    elapsed_s: float  # the whole row: ramp, window and drain
    hit_max: bool
    requests: int  # started inside the window
    completed_in_window: int
    rps: float
    tps: float
    total_tokens: int
    ttft_ms: dict[str, float | None]
    latency_ms: dict[str, float | None]
    errors: int
    error_kinds: dict[str, int]
    proxy_cpu_ticks: int
    proxy_cpu_ms_per_1k: float | None
    proxy_core_pct: float | None  # the proxy process's CPU over the window, % of one core
    load_cpu_ms_per_1k: float | None  # this process (the load generator)
    core_busy_pct: dict[int, float]
    others_pct: dict[str, float] = field(default_factory=dict)  # see `others_percent`
    cpu_ticks: dict[str, int] = field(default_factory=dict)  # per process, over the whole row
    upstream: dict[str, Any] = field(default_factory=dict)  # simulator counters for the row
    tps_ratio: float | None = None  # against direct of the same cell
    ttft_p50_delta_ms: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def cell(self) -> tuple[float, int]:
        return (self.delay_ms, self.concurrency)


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def summarize(system: str, concurrency: int, delay_ms: float, tokens: int,
              run: RowRun[Mark], row_ticks: dict[str, int], groups: Groups) -> Row:
    """`row_ticks`: CPU ticks per process over the whole row (the window's are in `run`)."""
    start, end = run.window
    seconds = max(end - start, 1e-9)
    inside: list[Sample] = [s for s in run.samples if start <= s.start < end]
    good = [s for s in inside if s.error is None]
    ttfts = [s.ttft for s in good if s.ttft is not None]
    latencies = [s.latency for s in good]
    errors = Counter(s.error for s in run.samples if s.error is not None)
    first, last = run.marks
    proxy_window = last.ticks.get("proxy", 0) - first.ticks.get("proxy", 0)
    proxy_ticks = row_ticks.get("proxy", 0)
    load_ticks = row_ticks.get("load", 0)
    per_1k = 1000.0 / CLK_TCK * 1000 / run.total_tokens if run.total_tokens else None
    return Row(
        system=system, concurrency=concurrency, delay_ms=delay_ms, tokens=tokens,
        window_s=seconds, elapsed_s=run.elapsed, hit_max=run.hit_max, requests=len(inside),
        completed_in_window=run.window_completed,
        rps=run.window_completed / seconds, tps=run.window_tokens / seconds,
        total_tokens=run.total_tokens,
        ttft_ms={f"p{q}": _ms(percentile(ttfts, q)) for q in (50, 95, 99)},
        latency_ms={f"p{q}": _ms(percentile(latencies, q)) for q in (50, 95, 99)},
        errors=sum(errors.values()), error_kinds=dict(errors.most_common()),
        proxy_cpu_ticks=proxy_ticks,
        proxy_cpu_ms_per_1k=proxy_ticks * per_1k if per_1k is not None else None,
        proxy_core_pct=100.0 * proxy_window / CLK_TCK / seconds if "proxy" in last.ticks
        else None,
        load_cpu_ms_per_1k=load_ticks * per_1k if per_1k is not None else None,
        core_busy_pct=busy_percent(first, last),
        others_pct=others_percent(first, last, seconds, groups),
        cpu_ticks=dict(row_ticks),
    )


def skipped(system: str, concurrency: int, delay_ms: float, tokens: int, reason: str) -> Row:
    """A row that was not run (its system failed every warm-up request): one error, no data."""
    return Row(system=system, concurrency=concurrency, delay_ms=delay_ms, tokens=tokens,
               window_s=0.0, elapsed_s=0.0, hit_max=False, requests=0, completed_in_window=0,
               rps=0.0, tps=0.0, total_tokens=0, ttft_ms={"p50": None, "p95": None, "p99": None},
               latency_ms={"p50": None, "p95": None, "p99": None}, errors=1,
               error_kinds={f"not run: {reason}": 1}, proxy_cpu_ticks=0,
               proxy_cpu_ms_per_1k=None, proxy_core_pct=None, load_cpu_ms_per_1k=None,
               core_busy_pct={}, notes=[f"not run: {reason}"])


def compare_with_direct(rows: Sequence[Row]) -> None:
    """Fill each row's ratios from the `direct` row of its cell (when there is one)."""
    direct = {r.cell: r for r in rows if r.system == "direct"}
    for row in rows:
        base = direct.get(row.cell)
        if base is None:
            continue
        row.tps_ratio = row.tps / base.tps if base.tps > 0 else None
        mine, theirs = row.ttft_ms["p50"], base.ttft_ms["p50"]
        row.ttft_p50_delta_ms = mine - theirs if mine is not None and theirs is not None \
            else None


def cell(value: float | None, digits: int = 1, signed: bool = False) -> str:
    """A table cell: `-` for a figure not measured, else the number (`signed`: with its +)."""
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def redis_ms_per_1k(row: Row) -> float:
    """Redis's CPU over the whole row per 1,000 tokens (0 when it did nothing or was not
    counted)."""
    ticks = row.cpu_ticks.get("redis", 0)
    return ticks * 1000 / CLK_TCK * 1000 / row.total_tokens if row.total_tokens else 0.0


def median_of(rows: Sequence[Row], pick: str) -> float:
    """The median over `rows` (rounds of one row) of "cpu" (proxy ms per 1k tokens), "redis"
    (Redis's ms per 1k tokens), "ttft" (p50), "ttft99" (p99) or "tps": the side-by-side
    benches' tables (clients.py, servers.py, versions.py)."""
    values = {"cpu": [r.proxy_cpu_ms_per_1k or 0.0 for r in rows],
              "redis": [redis_ms_per_1k(r) for r in rows],
              "ttft": [r.ttft_ms["p50"] or 0.0 for r in rows],
              "ttft99": [r.ttft_ms["p99"] or 0.0 for r in rows],
              "tps": [r.tps for r in rows]}[pick]
    return statistics.median(values)
