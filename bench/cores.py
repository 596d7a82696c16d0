"""Cores: `serve --workers N` for N = 1, 2 and 4 with a CPU budget per process, per core.

The `budgeted` table of `python -m bench.scenarios`. Every proxy process (the idle supervisor too)
runs in a cgroup of its own with the same CFS quota B (`--budget`, 0.2 core by default), all of them
on core 0: 1 process has B, 2 have 2B, 4 have 4B = 0.8 core, which leaves core 0 a fifth for the
machine's other work. The simulator, Redis and the load generator stay on core 1; each row says how
busy core 1 was and what the simulator, Redis and the load generator took of it, so one can see they
were not the bound.

Why 0.2 core: 4 x B must fit in core 0 with room to spare, and 4 processes' load (128 streams
at 20 ms/token, ~1,000 short answers a second) must fit in core 1 next to the simulator and
Redis. The quota's period is 20 ms (not the kernel's 100 ms): a throttled process then holds
a token back by at most ~16 ms, about one token interval, instead of up to 80 ms.

Loads, for `responses` and `responses-store`:
    short   16-token answers at 0 ms/token, 64 streams: every process at its budget (the quota
            throttles it in most periods), so req/s over N x B is requests per second per core;
    stream  256-token answers at 20 ms/token, `STREAMS_PER_PROCESS` streams per process: the
            budget is not the bound (the row should be >= 0.99 x direct), and the proxy's CPU
            per 1,000 tokens gives what one core sustains: tokens/s per core = 10^6 / (ms per
            1k), streams per core = that / (1000 / 20 ms) tokens per stream-second;
    check   one row per system through 1 process at the streams its budget should sustain by
            that derivation (streams per core x B): x direct there says whether it holds.

Per-core figures are per budgeted core of the proxy alone, and `+ Redis` adds Redis's CPU per
token (Redis serves every process; at 20 ms/token it is the store's flushes, a few ms per 1k).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench import cgroups
from bench.procs import CLK_TCK, POLL, cpu_ticks
from bench.stats import cell as _n

if TYPE_CHECKING:
    from bench.scenarios import Measured, Proxy

WORKERS = (1, 2, 4)
BUDGET = 0.2  # cores per proxy process
PERIOD_US = 20_000  # CFS period of the budgets: see the module's docstring
STREAMS_PER_PROCESS = 32  # the 20 ms/token row: 32 x 50 tokens/s = 1,600 tokens/s per process
STREAM_DELAY_MS = 20.0
CHECK_MAX_STREAMS = 512  # the check row's streams at most (a lower CPU figure cannot run away)
CHILDREN_TIMEOUT = 30.0


@dataclass(frozen=True)
class ProcessShare:
    """One budgeted proxy process over a row: its CPU and its quota's throttling."""

    name: str  # "main", "child1", "supervisor"
    cpu_pct: float  # % of one core over the whole row
    throttling: cgroups.Throttling


def wait_children(pid: int, count: int, timeout: float = CHILDREN_TIMEOUT) -> list[int]:
    """The `count` serving processes a `serve --workers N` supervisor forked (bounded wait)."""
    deadline = time.monotonic() + timeout
    found: list[int] = []
    while time.monotonic() < deadline:
        found = cgroups.children(pid)
        if len(found) >= count:
            return found[:count]
        time.sleep(POLL)
    raise RuntimeError(f"pid {pid} has {len(found)} child process(es), wanted {count}")


def budget(budgets: cgroups.Budgets, proxy: Proxy, workers: int, cores: float,
           period_us: int = PERIOD_US) -> list[cgroups.Group]:
    """Each process of `proxy` in its own group with `cores`: the serving processes first,
    then an idle supervisor (a child it replaces would land in the supervisor's group)."""
    pid = proxy.service.pid
    if workers == 1:
        return [budgets.limit(f"{proxy.name}-main", pid, cores, period_us)]
    groups = [budgets.limit(f"{proxy.name}-child{i}", child, cores, period_us)
              for i, child in enumerate(wait_children(pid, workers), 1)]
    groups.append(budgets.limit(f"{proxy.name}-supervisor", pid, cores, period_us))
    return groups


@dataclass(frozen=True)
class Reading:
    ticks: int
    throttling: cgroups.Throttling


def read(groups: Sequence[cgroups.Group]) -> list[Reading]:
    return [Reading(cpu_ticks(g.pid), g.stat()) for g in groups]


def shares(groups: Sequence[cgroups.Group], before: Sequence[Reading],
           after: Sequence[Reading], seconds: float) -> list[ProcessShare]:
    return [ProcessShare(g.name.rsplit("-", 1)[-1],
                         100.0 * (b.ticks - a.ticks) / CLK_TCK / max(seconds, 1e-9),
                         b.throttling - a.throttling)
            for g, a, b in zip(groups, before, after, strict=True)]


# -- per core ------------------------------------------------------------------------------------

def tokens_per_core_second(ms_per_1k: float | None) -> float | None:
    """Tokens one fully used core streams at this CPU cost per 1,000 tokens."""
    return 1e6 / ms_per_1k if ms_per_1k else None


def streams_per_core(ms_per_1k: float | None, delay_ms: float) -> float | None:
    """Concurrent streams of `delay_ms` per token one core sustains at this CPU cost: its
    tokens per second over one stream's (1000 / delay_ms)."""
    tokens = tokens_per_core_second(ms_per_1k)
    return tokens * delay_ms / 1000 if tokens is not None else None


def check_streams(ms_per_1k: float | None, delay_ms: float, cores: float) -> int | None:
    """The check row's streams: what `cores` should sustain by the derivation (at least 1)."""
    per_core = streams_per_core(ms_per_1k, delay_ms)
    if per_core is None:
        return None
    return max(1, min(CHECK_MAX_STREAMS, math.floor(per_core * cores)))


def workers_of(m: Measured) -> int:
    return int(m.label[1:]) if m.label[1:].isdigit() else 0


# -- report --------------------------------------------------------------------------------------


def _per_process(m: Measured, value: Callable[[ProcessShare], float | None]) -> str:
    """Serving processes' values, `a / b`; an idle supervisor's after a `+`."""
    served = [_n(value(p), 0) for p in m.processes if p.name != "supervisor"]
    idle = [_n(value(p), 0) for p in m.processes if p.name == "supervisor"]
    return " / ".join(served) + (f" (+{idle[0]} sup.)" if idle else "")


def _core1(m: Measured, load_cores: Sequence[int]) -> str:
    """Core 1's busy %, then the simulator's, Redis's and the load generator's % of a core."""
    r = m.row
    busy = [r.core_busy_pct[c] for c in load_cores if c in r.core_busy_pct]
    seconds = max(r.elapsed_s, 1e-9)
    pct = [100.0 * r.cpu_ticks.get(k, 0) / CLK_TCK / seconds for k in ("simulator", "redis",
                                                                        "load")]
    return f"{_n(max(busy) if busy else None, 0)} ({' / '.join(_n(p, 0) for p in pct)})"


def budgeted_table(rows: Sequence[Measured], cores: float, load_cores: Sequence[int],
                   skipped: str | None) -> list[str]:
    title = (f"**Processes with a CPU budget: `serve --workers N`, each proxy process in a "
             f"cgroup of its own with {cores:g} core (CFS quota, {PERIOD_US // 1000} ms "
             "period), all on core 0; simulator, Redis and the load generator on core 1**")
    if skipped is not None:
        return ["", title, "", f"Not run: {skipped}."]
    measured = [m for m in rows if m.table == "budgeted"]
    if not measured:
        return []
    lines = ["", title, "",
             "| system | load | processes | budget (cores) | streams | req/s | x 1 process "
             "| tok/s | x direct | TTFT p50 ms | proxy ms/1k | Redis ms/1k "
             "| CPU % of a core, per process | periods throttled %, per process "
             "| core 1 busy % (sim / Redis / load gen) | others % (core 0 / core 1) | errors |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|---:|"]
    base = {(m.row.system, m.row.tokens, m.row.delay_ms): m.row.rps for m in measured
            if m.label == "b1"}
    for m in measured:
        r, cpu = m.row, m.cpu_ms_per_1k
        n = workers_of(m)
        one = base.get((r.system, r.tokens, r.delay_ms))
        ratio = r.rps / one if one and n else None
        load = f"{r.tokens} tok x {r.delay_ms:g} ms"
        lines.append(
            f"| {r.system} | {load} | {n or '-'} | {_n(cores * n, 2) if n else '-'} "
            f"| {r.concurrency} | {r.rps:.0f} | {_n(ratio, 2)} | {r.tps:.0f} "
            f"| {_n(r.tps_ratio, 3)} | {_n(r.ttft_ms['p50'])} "
            f"| {_n(cpu['proxy']) if n else '-'} | {_n(cpu['redis']) if n else '-'} "
            f"| {_per_process(m, lambda p: p.cpu_pct) if n else '-'} "
            f"| {_per_process(m, lambda p: p.throttling.throttled_pct) if n else '-'} "
            f"| {_core1(m, load_cores)} "
            f"| {_n(r.others_pct.get('proxy core'), 0)} / {_n(r.others_pct.get('load cores'), 0)} "
            f"| {r.errors} |")
    return lines + per_core_table(rows, cores)


def per_core_table(rows: Sequence[Measured], cores: float) -> list[str]:
    """Per budgeted core: requests/s (short answers: the budget was the bound), tokens/s and
    streams at 20 ms/token (from CPU per 1k tokens), and the check row's x direct."""
    short = {(m.row.system, workers_of(m)): m for m in rows
             if m.table == "budgeted" and m.row.delay_ms == 0 and workers_of(m)}
    stream = {(m.row.system, workers_of(m)): m for m in rows
              if m.table == "budgeted" and m.row.delay_ms > 0 and workers_of(m)}
    checks = {m.row.system: m for m in rows if m.table == "cores-check" and workers_of(m)}
    if not short and not stream:
        return []
    delay = next((m.row.delay_ms for m in stream.values()), STREAM_DELAY_MS)
    lines = ["", f"**Per core** (budgeted cores of the proxy; `+ Redis` counts Redis's CPU per "
                 f"token too; streams at {delay:g} ms/token derived from CPU per 1k tokens, "
                 "then checked by one row through 1 process at what its budget should "
                 "sustain)", "",
             "| system | processes | short answers: req/s per core | tokens/s per core "
             "| + Redis | streams per core | + Redis | check: streams through 1 process "
             f"({cores:g} core), x direct |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for system, n in sorted({*short, *stream}):
        s, t = short.get((system, n)), stream.get((system, n))
        rps = s.row.rps / (cores * n) if s else None
        cpu = t.cpu_ms_per_1k if t else {"proxy": None, "both": None}
        check = checks.get(system) if n == 1 else None
        verdict = (f"{check.row.concurrency} streams: {_n(check.row.tps_ratio, 3)}"
                   if check is not None else "")
        lines.append(
            f"| {system} | {n} | {_n(rps, 0)} | {_n(tokens_per_core_second(cpu['proxy']), 0)} "
            f"| {_n(tokens_per_core_second(cpu['both']), 0)} "
            f"| {_n(streams_per_core(cpu['proxy'], delay), 0)} "
            f"| {_n(streams_per_core(cpu['both'], delay), 0)} | {verdict} |")
    return lines
