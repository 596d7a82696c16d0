"""`python -m bench.run` (`make bench`): every system in every cell, interleaved, in one run.

Order: start redis-server, the simulator and the proxy, pinned (`procs.py`, `stack.py`);
measure the idle proxy's CPU; warm each system up once; run the matrix (`matrix.py`), printing
each row as it ends; then the targets (`targets.py`), the raw JSON under bench/results/ and,
for the full default matrix or with `--docs`, docs/BENCHMARKS.md (`report.py`). The servers are
stopped on every way out, Ctrl-C and SIGTERM included, and this process gets its CPU affinity
back. Options: `options.py` (`--help`).

The proxy's source is fingerprinted when the proxy starts and again at the end: other
engineers edit proxy/ while benchmarks run, and the report must say which code it measured.
"""

from __future__ import annotations

import asyncio
import io
import os
import pstats
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from bench import machine, report, spy
from bench.loadgen import Sample
from bench.matrix import Bench, estimate_seconds
from bench.options import ROOT, Options, parse_options
from bench.procs import pin_self, plan_pinning
from bench.stack import Stack, StackOptions
from bench.stats import Row
from bench.targets import Target, evaluate

METHOD = (
    "Method: closed loop (each of N clients sends its next request when the previous one "
    "ends) over one keep-alive connection per client; the first requests are spread over one "
    "request duration (the ramp); the measured window then lasts at least `--seconds` and two "
    "full waves (2 x N requests ended), at most `--max-seconds`; requests in flight at its end "
    "run to completion and are checked. tok/s and req/s count what arrived inside the window; "
    "TTFT (first content delta) and latency percentiles cover the successful requests started "
    "inside it. Every stream is checked: chat streams must carry exactly N content deltas, "
    "`finish_reason` stop and end with `[DONE]`; Responses streams exactly N "
    "`response.output_text.delta` events and end with `response.completed`; a mismatch, a "
    "non-200 or a timeout is an error. The token count and delay come per request "
    "(`[[sim tokens=N delay_ms=D]]`), so every system gets an identical upstream stream. "
    "Proxy CPU: utime+stime of the proxy process (its in-process worker included) from "
    "/proc/<pid>/stat over the whole row, divided by the tokens the row streamed. Within each "
    "(delay, concurrency) cell the systems run one after another, `direct` first; a row that "
    "other processes on the machine disturbed is run again (`--retries`).")


@dataclass
class BenchResult:
    rows: list[Row]
    samples: list[list[Sample]]
    warmups: list[Row]
    captured: dict[tuple[str, int, float], bytes]
    targets: list[Target]
    json_path: Path | None = None


def command_line(options: Options) -> str:
    python = sys.executable
    if python.startswith(str(ROOT)):
        python = os.path.relpath(python, ROOT)
    return " ".join([python, "-m", "bench.run", *options.argv])


def run_bench(options: Options, out: Callable[[str], None] = print) -> BenchResult:
    """Run the matrix; the servers are stopped however this ends, and this process gets its
    own CPU affinity back (it pins itself to the load cores while it runs)."""
    affinity = os.sched_getaffinity(0)
    try:
        return _run_bench(options, out)
    finally:
        os.sched_setaffinity(0, affinity)


def _run_bench(options: Options, out: Callable[[str], None]) -> BenchResult:
    meta: dict[str, Any] = {"machine": machine.describe(ROOT), "command": command_line(options),
                            "options": {k: str(v) for k, v in options.__dict__.items()},
                            "method": METHOD}
    pinning = plan_pinning()
    pin_self(pinning.load)  # after `describe`, which reports the cores we were given
    out(f"bench: {len(options.systems)} systems x {len(options.concurrency)} concurrencies x "
        f"{len(options.delays)} delays, {options.tokens} tokens; estimated "
        f"{estimate_seconds(options) / 60:.1f} min")
    out(f"pinning: {pinning.note}")
    log_dir = options.results_dir / f"logs-{time.strftime('%Y%m%dT%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    meta["logs"] = _relative(log_dir)
    failure: Exception | None = None
    profile = log_dir / "proxy.prof" if options.profile else None
    background = max(options.concurrency) if "background" in options.systems else None
    stack = Stack(StackOptions(log_dir=log_dir, pinning=pinning, profile=profile,
                               background_concurrency=background))
    sources = machine.source_digests(ROOT / "proxy")
    with asyncio.Runner(loop_factory=_loop_factory()) as runner, stack:
        meta["proxy_command"] = stack.proxy_command
        meta["proxy_flags"] = stack.flags_note
        meta["pinning"] = {"plan": pinning.note, "verified": _verified(stack)}
        for name, masks in meta["pinning"]["verified"].items():
            out(f"  {name}: cpu {masks}")
        bench = Bench(options, stack, runner, out)
        if options.spy:
            bench.spy = _spy(log_dir, out, blocking=options.spy_blocking)
        meta["proxy_idle_cpu_ms_per_s"] = bench.idle_cpu()
        out(f"proxy idle: {meta['proxy_idle_cpu_ms_per_s']:.1f} ms CPU per second")
        warmups = bench.warm_up()
        try:
            bench.matrix()
        except Exception as exc:  # keep what was measured, then fail loudly
            failure = exc
            meta["aborted"] = f"{type(exc).__name__}: {exc}"
    meta["proxy_source"] = _source_note(sources, machine.source_digests(ROOT / "proxy"))
    targets = evaluate(bench.rows)
    path = report.json_path(options.results_dir)
    meta["json"] = _relative(path)
    report.write_json(path, meta, bench.rows, bench.samples, targets)
    out("")
    out(f"proxy source: {meta['proxy_source']}")
    out("targets (reported, not asserted):")
    for line in report.targets_lines(targets):
        out(line)
    out(f"raw results: {path}")
    if profile is not None:
        _print_profile(profile, out)
    if bench.spy is not None:
        _spy_report(bench, options, meta, out)
    if failure is not None:
        raise RuntimeError(f"bench aborted: {meta['aborted']}") from failure
    if options.write_docs:
        report.write_docs(options.docs_path,
                          report.render(meta, bench.rows, targets, bench.load_cores))
        out(f"wrote {options.docs_path}")
    return BenchResult(bench.rows, bench.samples, warmups, bench.captured, targets, path)


def _print_profile(path: Path, out: Callable[[str], None], top: int = 30) -> None:
    if not path.exists():
        out(f"no profile at {path} (the proxy did not exit cleanly)")
        return
    buffer = io.StringIO()
    pstats.Stats(str(path), stream=buffer).sort_stats("tottime").print_stats(top)
    out(buffer.getvalue())
    out(f"proxy profile: {path} (python -m pstats {path})")


def _spy(log_dir: Path, out: Callable[[str], None], *, blocking: bool) -> spy.Spy | None:
    exe = spy.find_py_spy()
    if exe is None:
        out(spy.MISSING)
        return None
    return spy.Spy(exe, log_dir, nonblocking=not blocking)


def _spy_report(bench: Bench, options: Options, meta: dict[str, Any],
                out: Callable[[str], None]) -> None:
    """Each profiled row's summary, printed and written as markdown under the results."""
    summaries = []
    for row in bench.rows:
        recording = bench.spied.get((row.system, row.concurrency, row.delay_ms))
        if recording is None:
            continue
        if recording.error is not None:
            out(f"py-spy {recording.name}: {recording.error}")
        summaries.append(spy.summarize(
            f"{row.system}, {row.concurrency} streams x {row.tokens} tokens x "
            f"{row.delay_ms:g} ms (raw: {_relative(recording.raw)})",
            recording.stacks(), row.proxy_cpu_ms_per_1k))
    if not summaries:
        out("py-spy: no row through the proxy was profiled")
        return
    path = spy.results_path(options.results_dir)
    header = [f"py-spy profiles of `{meta['command']}` ({meta['machine'].get('cpu', '')}, "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})"]
    spy.write_markdown(path, summaries, header)
    for summary in summaries:
        out("")
        for line in spy.markdown(summary):
            out(line)
    out(f"py-spy summary: {_relative(path)}")


def _source_note(start: dict[str, str], end: dict[str, str]) -> str:
    note = f"proxy/ sha256 {machine.digest(start)} at the proxy's start"
    changed = sorted(k for k in start.keys() | end.keys() if start.get(k) != end.get(k))
    if changed:
        note += (f"; changed during the run (the proxy kept the code it started with): "
                 f"{', '.join(changed[:8])}" + (" ..." if len(changed) > 8 else ""))
    return note


def _relative(path: Path) -> str:
    return os.path.relpath(path, ROOT) if str(path).startswith(str(ROOT)) else str(path)


def _verified(stack: Stack) -> dict[str, str]:
    """Per process, the distinct core masks of its threads (one, when pinning worked)."""
    return {name: " / ".join(sorted(set(masks.values()))) or "?"
            for name, masks in stack.pins().items()}


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds like Ctrl-C: every `finally` stops its servers


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        run_bench(options)
    except KeyboardInterrupt:
        print("bench: interrupted; servers stopped", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
