"""The matrix: every system in every (delay, concurrency) cell, one row at a time.

Per row: wait until the simulator has no stream left from the row before, zero its counters,
read the CPU counters, run the row (`loadgen.py`), read them again, summarise (`stats.py`),
cross-check against the simulator's counters and collect the proxy's warnings logged meanwhile.

Rows are interleaved: within a cell every system runs in turn, `direct` first, so a slow drift
of the machine moves all systems of a cell alike. A row during which other processes used more
than `OTHERS_LIMIT` % of a core on the proxy's core or the load core (`stats.others_percent`)
is run again, up to `--retries` times, after the machine has been quiet for a second (waiting
at most `QUIET_WAIT` seconds), while the run's `RERUN_BUDGET` lasts (so a machine that stays
busy cannot stretch the run by more than that); the last attempt is kept and the disturbance
noted either way.

A system whose every warm-up request failed is not run (its rows say so and count as errors):
a dead system would otherwise cost a full request timeout per client per row.

Budget of the full matrix (5 systems x 4 concurrencies x 2 delays = 40 rows, 256 tokens):
a row at 20 ms/token needs a ramp of one request (5.1 s), a window of two waves (10.2 s, more
when the proxy saturates) and a drain of up to one request (5.1 s, more when saturated): ~21 s,
so ~8 min for 20 rows; a 0 ms row needs its 5 s window or as long as two waves take at the
proxy's speed (capped by `--max-seconds`): ~3 min for 20 rows; plus start-up and warm-ups:
~10 minutes on a quiet machine, at most `RERUN_BUDGET` more on a busy one (~13 minutes seen
with other test suites running). `estimate_seconds` prints a rough figure first.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator

from bench import report
from bench.loadgen import RowPlan, RowRun, Sample, run_row
from bench.options import Options
from bench.procs import CLK_TCK, core_times, cpu_ticks
from bench.spy import Recording, Spy
from bench.stack import HOST, Stack
from bench.stats import (
    Groups,
    Mark,
    Row,
    compare_with_direct,
    others_percent,
    skipped,
    summarize,
)
from bench.systems import SYSTEMS, System

WARMUP_CONCURRENCY = 16
WARMUP_TIMEOUT = 20.0
OTHERS_LIMIT = 10.0  # % of one core used by other processes before a row counts as disturbed
QUIET_WAIT = 10.0
RERUN_BUDGET = 150.0  # seconds of re-runs and quiet waits per run, whatever `--retries` says
LOG_MARKERS = (" WARNING ", " ERROR ", "Traceback", "ERROR:")
LOG_NOTES = 3  # proxy log lines kept per row


def request_seconds(tokens: int, delay_ms: float) -> float:
    return tokens * delay_ms / 1000


def plan_row(stack: Stack, system: System, concurrency: int, delay_ms: float,
             options: Options) -> RowPlan:
    duration = request_seconds(options.tokens, delay_ms)
    port = stack.proxy_port if system.via_proxy else stack.sim_port
    return RowPlan(
        host=HOST, port=port, request=system.request(HOST, port, options.tokens, delay_ms),
        kind=system.kind, tokens=options.tokens, concurrency=concurrency,
        ramp=duration if concurrency > 1 else 0.0, min_seconds=options.seconds,
        max_seconds=options.max_seconds, waves=options.waves,
        # generous: 3 request durations, plus the whole row's tokens at 2,000 tokens/s
        timeout=15.0 + 3 * duration + options.tokens * concurrency / 2000,
        capture=options.capture,
    )


def estimate_seconds(options: Options) -> float:
    total = 8.0 + options.idle_seconds + len(options.systems) * (options.warmup_seconds + 1.5)
    for delay in options.delays:
        duration = request_seconds(options.tokens, delay)
        for concurrency in options.concurrency:
            ramp = duration if concurrency > 1 else 0.0
            window = max(options.seconds, options.waves * duration) if delay > 0 \
                else options.seconds + 3.0  # unknown in advance: a guess
            total += len(options.systems) * (ramp + min(window, options.max_seconds)
                                              + duration + 0.7)
    return total * 1.1  # some rows saturate and run longer, or get disturbed and run again


def core_groups(stack: Stack) -> Groups:
    pinning = stack.options.pinning
    if pinning.proxy is None or pinning.load is None:
        return {"all cores": (sorted(core_times()), ("proxy", "simulator", "redis", "load"))}
    return {"proxy core": (sorted(pinning.proxy), ("proxy",)),
            "load cores": (sorted(pinning.load), ("simulator", "redis", "load"))}


class Bench:
    def __init__(self, options: Options, stack: Stack, runner: asyncio.Runner,
                 out: Callable[[str], None]) -> None:
        self.options = options
        self.stack = stack
        self.runner = runner
        self.out = out
        pinning = stack.options.pinning
        self.load_cores = sorted(pinning.load) if pinning.load is not None else []
        self.groups = core_groups(stack)
        self.rows: list[Row] = []
        self.samples: list[list[Sample]] = []
        self.captured: dict[tuple[str, int, float], bytes] = {}
        self.broken: dict[str, str] = {}  # systems whose every warm-up request failed
        self.rerun_seconds = 0.0  # spent on re-runs and quiet waits so far
        # `--spy`: a py-spy profile of the proxy around each measured row through it; the
        # kept attempt's recording per (system, concurrency, delay)
        self.spy: Spy | None = None
        self.spied: dict[tuple[str, int, float], Recording] = {}

    # -- measuring -----------------------------------------------------------------------------
    def mark(self) -> Mark:
        stack = self.stack
        return Mark(ticks={"proxy": stack.proxy.cpu_ticks(), "simulator": stack.sim.cpu_ticks(),
                           "redis": stack.redis.cpu_ticks(), "load": cpu_ticks(os.getpid())},
                    cores=core_times())

    def idle_cpu(self) -> float:
        """The idle proxy's CPU, ms per second (its background loops), over `idle_seconds`."""
        before = self.stack.proxy.cpu_ticks()
        seconds = self.options.idle_seconds
        time.sleep(seconds)
        return (self.stack.proxy.cpu_ticks() - before) * 1000 / CLK_TCK / max(seconds, 1e-3)

    def wait_quiet(self) -> bool:
        """Wait (bounded) for a second in which other processes stay under OTHERS_LIMIT."""
        deadline = time.monotonic() + QUIET_WAIT
        while time.monotonic() < deadline:
            first = self.mark()
            time.sleep(1.0)
            if max(others_percent(first, self.mark(), 1.0, self.groups).values()) < OTHERS_LIMIT:
                return True
        return False

    def run_one(self, system: System, concurrency: int, delay_ms: float,
                plan: RowPlan | None = None) -> tuple[Row, RowRun[Mark]]:
        stack = self.stack
        stack.check_alive()
        idle_before = stack.wait_idle()
        stack.sim_reset()
        plan = plan or plan_row(stack, system, concurrency, delay_ms, self.options)
        log_from = stack.proxy.log_size()
        before = self.mark()
        run = self.runner.run(run_row(plan, self.mark))
        after = self.mark()
        ticks = {k: after.ticks[k] - before.ticks.get(k, 0) for k in after.ticks}
        row = summarize(system.name, concurrency, delay_ms, plan.tokens, run, ticks, self.groups)
        self._cross_check(row, run, idle_before)
        self._proxy_log(row, log_from)
        return row, run

    def measure(self, system: System, concurrency: int, delay_ms: float
                ) -> tuple[Row, RowRun[Mark]]:
        """`run_one`, again while other work on the machine disturbed it (bounded)."""
        disturbed: list[str] = []
        for attempt in range(self.options.retries + 1):
            with self.spying(system, concurrency, delay_ms):
                row, run = self.run_one(system, concurrency, delay_ms)
            worst = self._worst_others(system, row)
            if worst[1] < OTHERS_LIMIT:
                break
            disturbed.append(f"attempt {attempt + 1}: other processes used {worst[1]:.0f}% "
                             f"of the {worst[0]}")
            if attempt == self.options.retries or self.rerun_seconds >= RERUN_BUDGET:
                break
            started = time.monotonic()
            if not self.wait_quiet():
                disturbed.append(f"the machine was not quiet within {QUIET_WAIT:g} s")
            self.rerun_seconds += time.monotonic() - started + row.elapsed_s
        if disturbed:
            kept = self._worst_others(system, row)[1]
            state = "clean" if kept < OTHERS_LIMIT else f"disturbed too ({kept:.0f}%)"
            row.notes.append("; ".join(disturbed) + f"; the kept attempt is {state}")
        return row, run

    @contextlib.contextmanager
    def spying(self, system: System, concurrency: int, delay_ms: float) -> Iterator[None]:
        """py-spy on the proxy (its worker processes too) for one row through it, if `--spy`."""
        if self.spy is None or not system.via_proxy:
            yield
            return
        proxy = self.stack.proxy
        name = f"{system.name} c{concurrency} d{delay_ms:g}"
        with self.spy.record(name, proxy.pid, subprocesses=proxy.tree) as recording:
            yield
        self.spied[(system.name, concurrency, delay_ms)] = recording

    @staticmethod
    def _worst_others(system: System, row: Row) -> tuple[str, float]:
        """The most disturbed group of cores that matters to `system` (`direct` never touches
        the proxy's core)."""
        relevant = [(name, pct) for name, pct in row.others_pct.items()
                    if system.via_proxy or name != "proxy core"]
        return max(relevant, key=lambda kv: kv[1], default=("cores", 0.0))

    def _cross_check(self, row: Row, run: RowRun[Mark], idle_before: bool) -> None:
        """The row against the simulator's counters; odd findings become notes."""
        sim = self.stack.sim_stats()
        sent = sum(1 for s in run.samples if s.error is None or not s.error.startswith("connect"))
        keys = ("streams_started", "streams_completed", "streams_aborted", "streams_cut",
                "max_concurrent_streams")
        row.upstream = {k: sim.get(k) for k in keys}
        row.upstream["requests_sent"] = sent
        row.upstream["redis_used_memory"] = self.stack.redis_memory()
        if not idle_before:
            row.notes.append("the simulator still had streams open from the previous row")
        if sim.get("streams_started") != sent:
            row.notes.append(f"the simulator saw {sim.get('streams_started')} streams for "
                             f"{sent} requests")
        if sim.get("streams_aborted"):
            row.notes.append(f"{sim['streams_aborted']} upstream stream(s) aborted by their "
                             "client")
        if run.hit_max:
            row.notes.append(f"window capped at {self.options.max_seconds:g} s with "
                             f"{run.window_completed} requests ended in it (wanted "
                             f"{self.options.waves * row.concurrency})")

    def _proxy_log(self, row: Row, since: int) -> None:
        lines = self.stack.proxy.log_lines(since, LOG_MARKERS)
        row.notes.extend(f"proxy log: {line.strip()[:200]}" for line in lines[:LOG_NOTES])
        if len(lines) > LOG_NOTES:
            row.notes.append(f"proxy log: {len(lines) - LOG_NOTES} more warning/error line(s)")

    # -- the run ---------------------------------------------------------------------------------
    def warm_up(self) -> list[Row]:
        """Each system once, at 0 ms/token; a system with no successful request is not run."""
        options = self.options
        concurrency = min(WARMUP_CONCURRENCY, max(options.concurrency))
        rows: list[Row] = []
        for name in options.systems:
            system = SYSTEMS[name]
            plan = plan_row(self.stack, system, concurrency, 0.0, options)
            plan = dataclasses.replace(plan, ramp=0.0, min_seconds=options.warmup_seconds,
                                       waves=1, capture=False, timeout=WARMUP_TIMEOUT,
                                       max_seconds=max(5.0, options.warmup_seconds))
            row, run = self.run_one(system, concurrency, 0.0, plan)
            rows.append(row)
            if not any(s.error is None for s in run.samples):
                self.broken[name] = ", ".join(row.error_kinds) or "no request ended"
            self.out(f"warm-up {name}: {row.completed_in_window} requests at concurrency "
                     f"{concurrency}, {row.tps:.0f} tok/s, {row.errors} errors"
                     + (f" ({row.error_kinds})" if row.errors else ""))
            for note in row.notes:
                self.out(f"  {note}")
        return rows

    def matrix(self) -> None:
        options = self.options
        self.out("")
        self.out(report.table_header())
        for delay in options.delays:
            for concurrency in options.concurrency:
                cell: list[Row] = []
                for name in options.systems:
                    samples: list[Sample] = []
                    if name in self.broken:
                        row = skipped(name, concurrency, delay, options.tokens,
                                      f"every warm-up request failed ({self.broken[name]})")
                    else:
                        row, run = self.measure(SYSTEMS[name], concurrency, delay)
                        samples = run.samples
                        if run.captured is not None:
                            self.captured[(name, concurrency, delay)] = run.captured
                    cell.append(row)
                    compare_with_direct(cell)
                    self.rows.append(row)
                    self.samples.append(samples)
                    self.out(report.table_line(row, self.load_cores))
