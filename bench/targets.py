"""The issue's targets, evaluated against the rows: met or missed, and by how much.

Reported, never asserted: a missed target is a finding for whoever optimises the proxy, not a
failure of the benchmark. A target whose rows were not run (a `--quick` or partial matrix) is
listed as not measured.

    CPU per 1,000 streamed tokens (every row of the system):
        passthrough <= 20 ms, responses (store: false) <= 40 ms, responses-store <= 60 ms
    20 ms/token, 256 streams (every proxied system): tokens/s >= 0.95 x direct,
        TTFT p50 <= direct + 5 ms
    1 stream (every delay, every proxied system): TTFT p50 <= direct + 1 ms
    no errors (every row)

The burst targets (`burst`, fed by `python -m bench.scenarios`' burst table: every
stream started in the same instant, Redis on the proxy's core so its CPU competes with the
proxy's, default flags), for the store-on system at 256 streams x 20 ms/token:
        TTFT p50 <= direct + 10 ms, TTFT p99 <= direct + 50 ms, tokens/s >= 0.99 x direct
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.stats import Row

CPU_LIMITS_MS = {"passthrough": 20.0, "responses": 40.0, "responses-store": 60.0}
LOADED_DELAY_MS = 20.0
LOADED_CONCURRENCY = 256
LOADED_TPS_RATIO = 0.95
LOADED_TTFT_MS = 5.0
SINGLE_TTFT_MS = 1.0
BURST_SYSTEM = "responses-store"
BURST_TTFT_P50_MS = 10.0
BURST_TTFT_P99_MS = 50.0
BURST_TPS_RATIO = 0.99


@dataclass(frozen=True)
class Check:
    row: str  # which row: "responses 256x20ms"
    met: bool
    value: str
    miss: str  # by how much it missed ("" when met)


@dataclass(frozen=True)
class Target:
    name: str
    checks: tuple[Check, ...]

    @property
    def measured(self) -> bool:
        return bool(self.checks)

    @property
    def met(self) -> bool:
        return all(c.met for c in self.checks)


def label(row: Row) -> str:
    return f"{row.system} {row.concurrency}x{row.delay_ms:g}ms"


def _cpu(rows: Sequence[Row], system: str, limit: float) -> Target:
    checks = []
    for row in rows:
        value = row.proxy_cpu_ms_per_1k
        if row.system != system or value is None:
            continue
        checks.append(Check(label(row), value <= limit, f"{value:.1f} ms",
                            "" if value <= limit else f"+{value - limit:.1f} ms "
                                                      f"({value / limit:.2f}x)"))
    return Target(f"{system}: proxy CPU per 1,000 tokens <= {limit:g} ms", tuple(checks))


def _loaded(rows: Sequence[Row]) -> list[Target]:
    loaded = [r for r in rows if r.system != "direct" and r.delay_ms == LOADED_DELAY_MS
              and r.concurrency == LOADED_CONCURRENCY]
    ratio, ttft = [], []
    for row in loaded:
        if row.tps_ratio is not None:
            ok = row.tps_ratio >= LOADED_TPS_RATIO
            ratio.append(Check(label(row), ok, f"{row.tps_ratio:.3f}x direct",
                               "" if ok else f"{LOADED_TPS_RATIO - row.tps_ratio:.3f} below"))
        if row.ttft_p50_delta_ms is not None:
            ttft.append(_ttft_check(row, row.ttft_p50_delta_ms, LOADED_TTFT_MS))
    where = f"{LOADED_CONCURRENCY} streams at {LOADED_DELAY_MS:g} ms/token"
    return [Target(f"{where}: tokens/s >= {LOADED_TPS_RATIO} x direct", tuple(ratio)),
            Target(f"{where}: TTFT p50 <= direct + {LOADED_TTFT_MS:g} ms", tuple(ttft))]


def _ttft_check(row: Row, delta: float, limit: float) -> Check:
    ok = delta <= limit
    return Check(label(row), ok, f"{delta:+.1f} ms", "" if ok else f"+{delta - limit:.1f} ms")


def _single(rows: Sequence[Row]) -> Target:
    checks = [_ttft_check(r, r.ttft_p50_delta_ms, SINGLE_TTFT_MS) for r in rows
              if r.system != "direct" and r.concurrency == 1
              and r.ttft_p50_delta_ms is not None]
    return Target(f"1 stream: TTFT p50 <= direct + {SINGLE_TTFT_MS:g} ms", tuple(checks))


def _errors(rows: Sequence[Row]) -> Target:
    checks = [Check(label(r), r.errors == 0, f"{r.errors} errors",
                    "" if r.errors == 0 else f"{r.errors} errors") for r in rows]
    return Target("no errors", tuple(checks))


def burst(rows: Sequence[Row], concurrency: int = LOADED_CONCURRENCY,
          delay_ms: float = LOADED_DELAY_MS) -> list[Target]:
    """The burst targets over the burst table's rows (its `direct` row is the reference)."""
    cell = (delay_ms, concurrency)
    direct = next((r for r in rows if r.system == "direct" and r.cell == cell), None)
    stored = [r for r in rows if r.system == BURST_SYSTEM and r.cell == cell]
    p50: list[Check] = []
    p99: list[Check] = []
    ratio: list[Check] = []
    if direct is None or direct.tps <= 0:
        stored = []
    for row in stored:
        assert direct is not None  # for mypy: `stored` is empty without it
        for q, limit, out in (("p50", BURST_TTFT_P50_MS, p50), ("p99", BURST_TTFT_P99_MS, p99)):
            mine, theirs = row.ttft_ms[q], direct.ttft_ms[q]
            if mine is not None and theirs is not None:
                out.append(_ttft_check(row, mine - theirs, limit))
        value = row.tps / direct.tps
        ok = value >= BURST_TPS_RATIO
        ratio.append(Check(label(row), ok, f"{value:.3f}x direct",
                           "" if ok else f"{BURST_TPS_RATIO - value:.3f} below"))
    where = (f"burst of {concurrency} streams at {delay_ms:g} ms/token, store on, Redis on the "
             "proxy's core")
    return [Target(f"{where}: TTFT p50 <= direct + {BURST_TTFT_P50_MS:g} ms", tuple(p50)),
            Target(f"{where}: TTFT p99 <= direct + {BURST_TTFT_P99_MS:g} ms", tuple(p99)),
            Target(f"{where}: tokens/s >= {BURST_TPS_RATIO} x direct", tuple(ratio))]


def evaluate(rows: Sequence[Row]) -> list[Target]:
    targets = [_cpu(rows, system, limit) for system, limit in CPU_LIMITS_MS.items()]
    return [*targets, *_loaded(rows), _single(rows), _errors(rows)]
