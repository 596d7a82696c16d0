"""`python -m bench.scenarios` (run by `make bench` after the matrix): Redis placement,
bursts, short answers and processes.

Each table's ratios come from rows measured side by side in this one run, interleaved, with
the matrix's own row (`matrix.Bench.run_one`: same load generator, stream checks, CPU and TTFT
figures). What runs, on this machine's two cores:

    simulator, load generator (this process)        core 1 (the load core)
    redis "apart"                                   core 1
    redis "beside"                                  core 0, next to the proxy
    proxy "apart"    serve, pinned to core 0, using redis apart   (the matrix's placement)
    proxy "beside"   serve, pinned to core 0, using redis beside  (one host, one core)
    proxy "w1", "w2" serve --workers 1 / 2 on redis apart, not pinned (the processes rows)
    proxy "b1", "b2", "b4"  serve --workers 1 / 2 / 4 on redis apart, pinned to core 0, each
                     process in its own cgroup with a CPU quota (the budgeted rows)

The proxies not being measured sit idle. Every row's CPU is counted for the proxy (its worker
processes included) and for the Redis it uses: Redis's work is caused by the proxy, so
`proxy+redis ms/1k` is the cost of a token wherever Redis runs.

Tables:
  placement  256 streams x 256 tokens x 20 ms, ramped (steady): direct, passthrough,
             responses, responses-store, through the proxy with Redis apart and beside;
  burst      the same with every stream starting in the same instant (no ramp), Redis beside;
  short      16-token answers at 0 ms/token, 32 streams: requests per second, and requests per
             CPU-second of proxy + Redis (requests per second per core at saturation);
  processes  the short load at 64 streams through `serve --workers 1` and `--workers 2`, all
             processes unpinned (both cores shared by the proxy, Redis, the simulator and the
             load generator: see the docs for what that bounds);
  anchors    the gateways' published shape through the same two proxies: 50 concurrent clients,
             non-streamed /v1/responses (store off and on) and the direct upstream, 16-token
             answers: req/s, req/s per proxy core and the added p50/p95 latency
             (bench/anchors.py);
  budgeted   `serve --workers 1`, `2` and `4` where every proxy process (the idle supervisor
             too) runs in a cgroup of its own with the same CPU quota B (`--budget`, 0.2 core),
             all of them on core 0: short answers (64 streams; the quota binds: req/s per
             core) and 256-token streams at 20 ms/token (32 streams per process; the quota
             does not bind: CPU per token gives tokens/s and streams per core), then one row
             per system checking the derived streams per core through 1 process. Each row
             reports every process's CPU and how often its quota ran out (`cpu.stat`), and
             core 1's busy % with the simulator's, Redis's and the load generator's shares, so
             one can see the load side was not the bound (bench/cores.py).
             Skipped, with one line saying why, where cgroups are not writable (non-root, CI).

`--spy` records a py-spy profile of the proxy during each row through it (`spy.py`) and writes
the summaries under bench/results/.

`--quick` is a smoke run (fewer streams and tokens, short windows). `--docs` writes the tables
into docs/BENCHMARKS.md between the `scenarios:begin` / `scenarios:end` markers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import anchors, cgroups, cores, machine, report, spy, targets
from bench.cores import ProcessShare
from bench.matrix import Bench, plan_row
from bench.options import ROOT, Options, module_parser, parse_options
from bench.procs import (
    CLK_TCK,
    Pinning,
    Service,
    free_port,
    pin_self,
    plan_pinning,
)
from bench.run import _loop_factory
from bench.stack import HOST, Stack, StackOptions, http_ok, redis_ok
from bench.stats import Row, compare_with_direct
from bench.stats import cell as _n
from bench.systems import SYSTEMS

BEGIN, END = "<!-- scenarios:begin -->", "<!-- scenarios:end -->"
STREAM_SYSTEMS = ("direct", "passthrough", "responses", "responses-store")
SHORT_SYSTEMS = ("direct", "passthrough", "responses", "responses-store")
PROCESS_SYSTEMS = ("responses", "responses-store")
TABLES = ("placement", "burst", "short", "processes", "anchors", "budgeted")
BUDGET = cores.BUDGET  # cores per proxy process in the budgeted rows
BUDGET_STREAM_TOKENS = 256  # the budgeted streaming rows: 256-token answers at 20 ms/token


@dataclass(frozen=True)
class Sizes:
    streams: int = 256
    tokens: int = 256
    delay: float = 20.0
    short_streams: int = 32
    process_streams: int = 64
    short_tokens: int = 16
    seconds: float = 5.0
    waves: int = 2
    stream_tokens: int = BUDGET_STREAM_TOKENS  # the budgeted streaming rows
    stream_delay: float = cores.STREAM_DELAY_MS
    streams_per_process: int = cores.STREAMS_PER_PROCESS  # the budgeted streaming rows
    workers: tuple[int, ...] = cores.WORKERS  # the budgeted rows' `serve --workers N`


QUICK = Sizes(streams=16, tokens=32, short_streams=8, process_streams=8, seconds=1.0, waves=1,
              stream_tokens=64, streams_per_process=4)


@dataclass
class Proxy:
    """One proxy under test and the Redis it uses."""

    name: str
    service: Service
    port: int
    redis: Service
    redis_port: int


@dataclass
class Measured:
    table: str
    label: str  # the proxy (or `-` for direct)
    row: Row
    processes: list[ProcessShare] = dataclasses.field(default_factory=list)  # budgeted rows
    recording: spy.Recording | None = None  # `--spy`

    @property
    def cpu_ms_per_1k(self) -> dict[str, float | None]:
        tokens = self.row.total_tokens
        out: dict[str, float | None] = {}
        for key in ("proxy", "redis"):
            ticks = self.row.cpu_ticks.get(key, 0)
            out[key] = ticks * 1000 / CLK_TCK * 1000 / tokens if tokens else None
        both = [v for v in out.values() if v is not None]
        out["both"] = sum(both) if len(both) == 2 else None
        return out

    @property
    def requests_per_proxy_cpu_second(self) -> float | None:
        ticks = self.row.cpu_ticks.get("proxy", 0)
        done = self.row.upstream.get("streams_completed") or 0
        return done / (ticks / CLK_TCK) if ticks else None

    @property
    def requests_per_cpu_second(self) -> float | None:
        """Requests the row completed per CPU-second of proxy + Redis."""
        ticks = self.row.cpu_ticks.get("proxy", 0) + self.row.cpu_ticks.get("redis", 0)
        done = self.row.upstream.get("streams_completed") or 0
        return done / (ticks / CLK_TCK) if ticks else None


def _redis(name: str, cores: frozenset[int] | None, log_dir: Path, env: dict[str, str],
           workdir: str) -> tuple[Service, int]:
    exe = shutil.which("redis-server")
    assert exe is not None
    port = free_port()
    service = Service(name, [exe, "--bind", HOST, "--port", str(port), "--save", "",
                             "--appendonly", "no", "--dir", workdir, "--protected-mode", "yes"],
                      log_dir / f"{name}.log", cores, env)
    service.start(lambda: redis_ok(port))
    return service, port


def _proxy(stack: Stack, name: str, redis: Service, redis_port: int,
           cores: frozenset[int] | None, log_dir: Path, extra: Sequence[str] = ()) -> Proxy:
    port = free_port()
    args = list(stack.proxy.args)
    args[args.index("--port") + 1] = str(port)
    args[args.index("--redis-url") + 1] = f"redis://{HOST}:{redis_port}/0"
    service = Service(name, [*args, *extra], log_dir / f"{name}.log", cores, stack.proxy.env,
                      tree=bool(extra))
    service.start(lambda: http_ok(port, "/healthz") and http_ok(port, "/readyz"))
    return Proxy(name, service, port, redis, redis_port)


@contextmanager
def _using(stack: Stack, proxy: Proxy) -> Iterator[None]:
    """Point the matrix's stack (what `Bench` measures) at `proxy` and its Redis."""
    saved = (stack.proxy, stack.proxy_port, stack.redis, stack.redis_port)
    stack.proxy, stack.proxy_port = proxy.service, proxy.port
    stack.redis, stack.redis_port = proxy.redis, proxy.redis_port
    try:
        yield
    finally:
        stack.proxy, stack.proxy_port, stack.redis, stack.redis_port = saved


class Scenarios:
    def __init__(self, sizes: Sizes, out: Callable[[str], None] = print,
                 only: Sequence[str] = TABLES, *, budget_cores: float = BUDGET,
                 spy_exe: str | None = None, spy_blocking: bool = False) -> None:
        self.sizes = sizes
        self.only = set(only)
        self.out = out
        self.budget_cores = budget_cores
        self.spy_exe = spy_exe
        self.spy_blocking = spy_blocking
        self.spy: spy.Spy | None = None
        self.results: list[Measured] = []
        self.skipped: dict[str, str] = {}  # table -> why it was not run
        self.load_cores: list[int] = []

    def options(self, tokens: int, delay: float, concurrency: int) -> Options:
        return parse_options(["--systems", ",".join(STREAM_SYSTEMS), "--concurrency",
                              str(concurrency), "--delays", f"{delay:g}", "--tokens",
                              str(tokens), "--seconds", f"{self.sizes.seconds:g}", "--waves",
                              str(self.sizes.waves), "--retries", "0", "--no-docs",
                              "--warmup-seconds", "0.5"])

    def row(self, bench: Bench, stack: Stack, table: str, proxy: Proxy | None, system: str,
            tokens: int, delay: float, concurrency: int, *, burst: bool = False,
            groups: Sequence[cgroups.Group] = ()) -> Row:
        options = self.options(tokens, delay, concurrency)
        bench.options = options
        spec = SYSTEMS[system]
        plan = plan_row(stack, spec, concurrency, delay, options)
        if burst:
            plan = dataclasses.replace(plan, ramp=0.0)  # every stream in the same instant
        label = proxy.name if proxy is not None and spec.via_proxy else "-"
        before = cores.read(groups)
        with self._spying(f"{table} {label} {system} {tokens}t", stack, spec.via_proxy) as rec:
            row, _ = bench.run_one(spec, concurrency, delay, plan)
        processes = cores.shares(groups, before, cores.read(groups), row.elapsed_s)
        self.results.append(Measured(table, label, row, processes, rec))
        cell = [m.row for m in self.results if m.table == table and m.label in (label, "-")]
        compare_with_direct(cell)
        measured = self.results[-1]
        cpu = measured.cpu_ms_per_1k
        self.out(f"{table:<9} {label:<7} {system:<16} tok/s {row.tps:8.0f}  x direct "
                 f"{row.tps_ratio or 0:5.3f}  ttft p50 {row.ttft_ms['p50'] or 0:8.1f} ms  "
                 f"proxy+redis {cpu['both'] or 0:6.1f} ms/1k  req/s {row.rps:7.1f}  "
                 f"errors {row.errors}")
        return row

    @contextmanager
    def _spying(self, name: str, stack: Stack, via_proxy: bool
                ) -> Iterator[spy.Recording | None]:
        if self.spy is None or not via_proxy:
            yield None
            return
        proxy = stack.proxy
        with self.spy.record(name, proxy.pid, subprocesses=proxy.tree) as recording:
            yield recording

    def run(self) -> list[Measured]:
        sizes = self.sizes
        pinning = plan_pinning()
        affinity = os.sched_getaffinity(0)
        pin_self(pinning.load)
        log_dir = ROOT / "bench" / "results" / f"scenarios-{time.strftime('%Y%m%dT%H%M%S')}"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.load_cores = sorted(pinning.load) if pinning.load is not None else []
        if self.spy_exe is not None:
            self.spy = spy.Spy(self.spy_exe, log_dir, nonblocking=not self.spy_blocking)
        redis_dir = tempfile.mkdtemp(prefix="bench-scenarios-")
        stack = Stack(StackOptions(log_dir=log_dir, pinning=pinning))  # no background rows
        extra: list[Service] = []
        try:
            with asyncio.Runner(loop_factory=_loop_factory()) as runner, stack:
                env = stack.proxy.env or {}
                beside_redis, beside_port = _redis("redis-beside", pinning.proxy, log_dir, env,
                                                   redis_dir)
                extra.append(beside_redis)
                apart = Proxy("apart", stack.proxy, stack.proxy_port, stack.redis,
                              stack.redis_port)
                beside = _proxy(stack, "beside", beside_redis, beside_port, pinning.proxy,
                                log_dir)
                extra.append(beside.service)
                bench = Bench(self.options(sizes.tokens, sizes.delay, sizes.streams), stack,
                              runner, self.out)
                for proxy in (apart, beside):
                    with _using(stack, proxy):
                        bench.warm_up()
                if "placement" in self.only:
                    self.placement(bench, stack, apart, beside)
                if "burst" in self.only:
                    self.burst(bench, stack, beside)
                if "short" in self.only:
                    self.short(bench, stack, beside)
                if "processes" in self.only or anchors.TABLE in self.only:
                    # The processes and anchors rows run unpinned: both cores for everyone.
                    free = Pinning(None, None, "unpinned")
                    pin_self(frozenset(affinity))
                    w1 = _proxy(stack, "w1", stack.redis, stack.redis_port, free.proxy,
                                log_dir, ["--workers", "1"])
                    extra.append(w1.service)
                    w2 = _proxy(stack, "w2", stack.redis, stack.redis_port, free.proxy,
                                log_dir, ["--workers", "2"])
                    extra.append(w2.service)
                    if "processes" in self.only:
                        self.processes(bench, stack, w1, w2)
                    if anchors.TABLE in self.only:
                        self.anchors(bench, stack, w1, w2)
                    pin_self(pinning.load)
                if "budgeted" in self.only:
                    self.budgeted(bench, stack, pinning, log_dir)
        finally:
            for service in extra:
                service.stop()
            shutil.rmtree(redis_dir, ignore_errors=True)
            os.sched_setaffinity(0, affinity)
        return self.results

    def placement(self, bench: Bench, stack: Stack, apart: Proxy, beside: Proxy) -> None:
        s = self.sizes
        self.row(bench, stack, "placement", None, "direct", s.tokens, s.delay, s.streams)
        for system in STREAM_SYSTEMS[1:]:
            for proxy in (apart, beside):
                with _using(stack, proxy):
                    self.row(bench, stack, "placement", proxy, system, s.tokens, s.delay,
                             s.streams)

    def burst(self, bench: Bench, stack: Stack, beside: Proxy) -> None:
        s = self.sizes
        for system in STREAM_SYSTEMS:
            with _using(stack, beside):
                self.row(bench, stack, "burst", beside, system, s.tokens, s.delay, s.streams,
                         burst=True)

    def short(self, bench: Bench, stack: Stack, beside: Proxy) -> None:
        s = self.sizes
        for system in SHORT_SYSTEMS:
            with _using(stack, beside):
                self.row(bench, stack, "short", beside, system, s.short_tokens, 0.0,
                         s.short_streams)

    def processes(self, bench: Bench, stack: Stack, w1: Proxy, w2: Proxy) -> None:
        s = self.sizes
        for system in PROCESS_SYSTEMS:
            for proxy in (w1, w2):
                with _using(stack, proxy):
                    self.row(bench, stack, "processes", proxy, system, s.short_tokens, 0.0,
                             s.process_streams)

    def anchors(self, bench: Bench, stack: Stack, w1: Proxy, w2: Proxy) -> None:
        """bench/anchors.py: each proxy's rows after a direct row of their own."""
        s = self.sizes
        for proxy in (w1, w2):
            with _using(stack, proxy):
                for system in anchors.SYSTEMS:
                    self.row(bench, stack, anchors.TABLE, proxy, system, s.short_tokens, 0.0,
                             anchors.CONCURRENCY)

    def budgeted(self, bench: Bench, stack: Stack, pinning: Pinning, log_dir: Path) -> None:
        """`serve --workers N` for each N of `sizes.workers` on core 0, each process in its own
        cgroup with `budget_cores` (bench/cores.py); the proxies are stopped and the groups
        removed however this ends."""
        reason = cgroups.unavailable() if pinning.pinned else "it needs 2 usable cores"
        if reason is not None:
            self.skipped["budgeted"] = reason
            self.out(f"budgeted: skipped: {reason}")
            return
        with cgroups.Budgets(cgroups.hierarchy()) as budgets:
            started: list[Service] = []
            try:
                proxies: list[tuple[Proxy, list[cgroups.Group]]] = []
                for workers in self.sizes.workers:
                    proxy = _proxy(stack, f"b{workers}", stack.redis, stack.redis_port,
                                   pinning.proxy, log_dir, ["--workers", str(workers)])
                    started.append(proxy.service)
                    groups = cores.budget(budgets, proxy, workers, self.budget_cores)
                    self.out(f"budgeted {proxy.name}: " + ", ".join(
                        f"{g.name} pid {g.pid}" for g in groups)
                        + f", {self.budget_cores:g} core each")
                    proxies.append((proxy, groups))
                    with _using(stack, proxy):
                        bench.warm_up()
                self._budgeted_rows(bench, stack, proxies)
            finally:
                for service in started:  # before the groups go: they empty as these exit
                    service.stop()

    def _budgeted_rows(self, bench: Bench, stack: Stack,
                       proxies: Sequence[tuple[Proxy, list[cgroups.Group]]]) -> None:
        s = self.sizes
        for system in PROCESS_SYSTEMS:  # short answers: every process at its budget
            for proxy, groups in proxies:
                with _using(stack, proxy):
                    self.row(bench, stack, "budgeted", proxy, system, s.short_tokens, 0.0,
                             s.process_streams, groups=groups)
        for proxy, groups in proxies:  # streams: the budget is not the bound
            streams = s.streams_per_process * len([g for g in groups
                                                   if not g.name.endswith("supervisor")])
            self.row(bench, stack, "budgeted", None, "direct", s.stream_tokens, s.stream_delay,
                     streams)
            for system in PROCESS_SYSTEMS:
                with _using(stack, proxy):
                    self.row(bench, stack, "budgeted", proxy, system, s.stream_tokens,
                             s.stream_delay, streams, groups=groups)
        one, groups = proxies[0]
        for system in PROCESS_SYSTEMS:  # the derivation, checked through 1 process
            derived = next((m for m in self.results if m.table == "budgeted"
                            and m.label == one.name and m.row.system == system
                            and m.row.delay_ms > 0), None)
            check = cores.check_streams(derived.cpu_ms_per_1k["proxy"] if derived else None,
                                        s.stream_delay, self.budget_cores)
            if check is None:
                continue
            self.row(bench, stack, "cores-check", None, "direct", s.stream_tokens,
                     s.stream_delay, check)
            with _using(stack, one):
                self.row(bench, stack, "cores-check", one, system, s.stream_tokens,
                         s.stream_delay, check, groups=groups)


# -- report --------------------------------------------------------------------------------------


def tables(results: Sequence[Measured], sizes: Sizes, *, skipped: Mapping[str, str] | None = None,
           budget_cores: float = BUDGET, load_cores: Sequence[int] = (1,)) -> list[str]:
    lines: list[str] = []
    stream_head = ("| system | Redis | tok/s | x direct | TTFT p50 ms | dTTFT p50 ms | TTFT p99 ms "
                   "| proxy ms/1k | Redis ms/1k | proxy+Redis ms/1k | proxy core % | errors |")
    stream_rule = "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    titles = {
        "placement": f"Steady: {sizes.streams} streams x {sizes.tokens} tokens x "
                     f"{sizes.delay:g} ms, starts spread over one request (ramp)",
        "burst": f"Burst: {sizes.streams} streams x {sizes.tokens} tokens x {sizes.delay:g} ms, "
                 "all starting at once, Redis beside the proxy",
    }
    for table in ("placement", "burst"):
        rows = [m for m in results if m.table == table]
        if not rows:
            continue
        lines += ["", f"**{titles[table]}**", "", stream_head, stream_rule]
        for m in rows:
            r, cpu = m.row, m.cpu_ms_per_1k
            redis = {"apart": "other core", "beside": "proxy's core"}.get(m.label, "-")
            lines.append(
                f"| {r.system} | {redis} | {r.tps:.0f} | {_n(r.tps_ratio, 3)} "
                f"| {_n(r.ttft_ms['p50'])} | {_n(r.ttft_p50_delta_ms, 1, True)} "
                f"| {_n(r.ttft_ms['p99'])} | {_n(cpu['proxy'])} | {_n(cpu['redis'])} "
                f"| {_n(cpu['both'])} | {_n(r.proxy_core_pct, 0)} | {r.errors} |")
        if table == "burst":
            lines += ["", "The burst targets (reported, not asserted; `bench/targets.py`):",
                      *report.targets_lines(targets.burst([m.row for m in rows],
                                                          sizes.streams, sizes.delay))]
    short = [m for m in results if m.table == "short"]
    if short:
        lines += ["", f"**Short answers: {sizes.short_tokens} tokens at 0 ms/token, "
                      f"{sizes.short_streams} streams, Redis beside the proxy**", "",
                  "| system | req/s | requests per CPU-second (proxy + Redis) | TTFT p50 ms "
                  "| proxy core % | errors |", "|---|---:|---:|---:|---:|---:|"]
        for m in short:
            r = m.row
            per_core = "-" if r.system == "direct" else _n(m.requests_per_cpu_second, 0)
            lines.append(f"| {r.system} | {r.rps:.0f} | {per_core} | {_n(r.ttft_ms['p50'])} "
                         f"| {_n(r.proxy_core_pct, 0)} | {r.errors} |")
    procs = [m for m in results if m.table == "processes"]
    if procs:
        lines += ["", f"**Processes: `serve --workers 1` against `--workers 2`, "
                      f"{sizes.short_tokens}-token answers at 0 ms/token, "
                      f"{sizes.process_streams} streams; the proxy processes and the load "
                      "generator unpinned "
                      "(simulator and Redis stay on core 1)**", "",
                  "| system | processes | req/s | x 1 process | requests per CPU-second "
                  "(proxy + Redis) | proxy CPU % of a core | errors |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        base = {m.row.system: m.row.rps for m in procs if m.label == "w1"}
        for m in procs:
            r = m.row
            ratio = r.rps / base[r.system] if base.get(r.system) else None
            lines.append(f"| {r.system} | {m.label[1:]} | {r.rps:.0f} | {_n(ratio, 2)} "
                         f"| {_n(m.requests_per_cpu_second, 0)} | {_n(r.proxy_core_pct, 0)} "
                         f"| {r.errors} |")
    lines += anchors.table(results, sizes.short_tokens)
    lines += cores.budgeted_table(results, budget_cores, load_cores,
                                  (skipped or {}).get("budgeted"))
    return lines


def spy_report(results: Sequence[Measured]) -> None:
    summaries = []
    for m in results:
        if m.recording is None:
            continue
        if m.recording.error is not None:
            print(f"py-spy {m.recording.name}: {m.recording.error}")
        raw = os.path.relpath(m.recording.raw, ROOT)
        summaries.append(spy.summarize(f"{m.recording.name} (raw: {raw})",
                                       m.recording.stacks(), m.cpu_ms_per_1k["proxy"]))
    path = spy.results_path(ROOT / "bench" / "results", "spy-scenarios")
    spy.write_markdown(path, summaries, [f"py-spy profiles of `python -m bench.scenarios` "
                                         f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})"])
    for summary in summaries:
        print("\n".join(["", *spy.markdown(summary)]))
    print(f"py-spy summary: {path}")


def write_docs(path: Path, lines: Sequence[str], meta: str) -> None:
    text = path.read_text()
    block = "\n".join([BEGIN, "### The scenarios' tables (generated by `python -m "
                       "bench.scenarios`; do not edit by hand)", "", meta, *lines, END])
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        marker = "<!-- bench:begin -->"
        text = text.replace(marker, block + "\n\n" + marker) if marker in text \
            else text + "\n" + block + "\n"
    path.write_text(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench.scenarios", __doc__)
    parser.add_argument("--quick", action="store_true", help="smoke run, about a minute")
    parser.add_argument("--docs", action="store_true", help="write docs/BENCHMARKS.md")
    parser.add_argument("--only", default=",".join(TABLES),
                        help=f"comma-separated tables to run (default {','.join(TABLES)})")
    parser.add_argument("--streams", type=int, help="streams of the placement and burst rows")
    parser.add_argument("--tokens", type=int, help="tokens of the placement and burst rows")
    parser.add_argument("--delay", type=float,
                        help="ms per token of the placement and burst rows (default 20)")
    parser.add_argument("--budget", type=float, default=BUDGET,
                        help=f"cores per proxy process in the budgeted rows (default {BUDGET:g}; "
                        "x 4 processes at most one core)")
    spy.add_arguments(parser, "each row through it")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not 0 < args.budget <= 1:
        parser.error("--budget takes a share of one core, > 0 and <= 1")
    sizes = QUICK if args.quick else Sizes()
    if args.budget * max(sizes.workers) > 1:  # every budgeted process shares core 0
        parser.error(f"--budget x {max(sizes.workers)} processes must fit in one core")
    if args.streams:
        sizes = dataclasses.replace(sizes, streams=args.streams)
    if args.tokens:
        sizes = dataclasses.replace(sizes, tokens=args.tokens)
    if args.delay is not None:
        if args.delay <= 0:
            parser.error("--delay takes ms per token, > 0")
        sizes = dataclasses.replace(sizes, delay=args.delay)
    only = [t for t in args.only.split(",") if t]
    if any(t not in TABLES for t in only):
        parser.error(f"--only takes {','.join(TABLES)}")
    spying = args.spy or args.spy_blocking
    spy_exe = spy.find_py_spy() if spying else None
    if spying and spy_exe is None:
        print(spy.MISSING)
    scenarios = Scenarios(sizes, only=only, budget_cores=args.budget, spy_exe=spy_exe,
                          spy_blocking=args.spy_blocking)
    results = scenarios.run()
    lines = tables(results, sizes, skipped=scenarios.skipped, budget_cores=args.budget,
                   load_cores=scenarios.load_cores)
    print("\n".join(lines))
    if scenarios.spy is not None:
        spy_report(results)
    if args.docs and scenarios.spy is not None:
        print("docs/BENCHMARKS.md not written: py-spy was sampling the proxy")
    elif args.docs:
        info = machine.describe(ROOT)
        meta = (f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
                f"proxy commit {info.get('commit', '?')}; {info.get('cpu', '')}")
        write_docs(ROOT / "docs" / "BENCHMARKS.md", lines, meta)
        print("wrote docs/BENCHMARKS.md")
    errors = sum(m.row.errors for m in results)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
