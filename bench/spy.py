"""Sampling profiles of the proxy during a measured row (py-spy), and their summary.

Why py-spy and not cProfile (`--profile`): cProfile hooks every Python call, so cheap,
numerous functions look expensive and the CPU figures inflate; py-spy reads the stacks of the
running process from outside (`--nonblocking`: without even pausing it) a few hundred times a
second, so the row runs at its own speed and each function's share of the samples is its share
of the proxy's CPU. Samples are only taken of threads that are running (py-spy leaves idle
threads out unless `--idle`), so the percentages are of the time the process was on a CPU.

How: `Spy.record(name, pid)` runs `py-spy record -p PID -r RATE -f raw --nonblocking` (with
`--subprocesses` for a `serve --workers N` supervisor) around one row and stops it with SIGINT,
on which py-spy writes its file. Raw output is one line per distinct stack:
`frame;frame;...;leaf COUNT`, a frame being `function (path/file.py:LINE)`.

What the summary gives (`summarize`, `markdown`):
  - buckets: each sample goes to the first rule of `RULES` that one of its frames matches
    (inclusive membership; the order of `RULES` is the precedence), else to "other";
  - the top functions by own time (the leaf frame) and by inclusive time (anywhere in the
    stack, counted once per sample), keyed by function and file (line numbers dropped);
  - the top lines by own time (function, file and line);
  - every percentage also as microseconds per token: the row's proxy CPU in ms per 1k tokens
    is microseconds per token, and a function with p % of the samples costs p % of it.
With `--nonblocking` a stack is read while the process runs, so a fifth to a half of them (in
the 256-stream rows) lose their outer frames: their own time still counts, their bucket goes by
the frames that were read, and the summary says how many; `Spy(nonblocking=False)` (the
`--spy-blocking` option) pauses the process per sample for whole stacks, slowing the row.
Samples of the loop itself (no Python frame of ours or the libraries' beyond the loop's run
call: uvloop is Cython, so its own work shows as the Python frame that entered it) fall in the
"event loop" bucket by the leaf rule there.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

RATE = 200  # samples per second
STOP_TIMEOUT = 15.0  # py-spy writes its file on SIGINT; a large profile takes a moment
TOP = 15


def add_arguments(parser: argparse.ArgumentParser, runs: str) -> None:
    """`--spy` and `--spy-blocking`, as every bench command that can profile its proxy takes
    them (`runs`: what the flag records, e.g. "each row through it")."""
    parser.add_argument("--spy", action="store_true",
                        help=f"record a py-spy profile of the proxy during {runs} and "
                             "summarise it under bench/results/ (needs py-spy; docs are not "
                             "written)")
    parser.add_argument("--spy-blocking", action="store_true",
                        help="--spy with py-spy pausing the proxy for each sample (whole "
                             "stacks; the rows run slower)")


def find_py_spy() -> str | None:
    """The py-spy executable: on PATH, or beside this Python (a venv's bin/)."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


MISSING = "py-spy is not installed (pip install py-spy, or `make bench`): no profile recorded"


# -- parsing ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int | None

    @property
    def key(self) -> tuple[str, str]:
        return (self.function, self.file)

    def __str__(self) -> str:
        return f"{self.function} ({self.file})"


_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")

Stack = tuple[Frame, ...]


def parse_frame(text: str) -> Frame | None:
    """`function (file.py:LINE)`; None for what is not a Python frame (py-spy's process and
    thread headers under `--subprocesses`/`--threads`)."""
    match = _FRAME.match(text.strip())
    if match is None:
        return None
    line = match.group("line")
    return Frame(match.group("function"), match.group("file"), int(line) if line else None)


def parse_raw(text: str) -> list[tuple[Stack, int]]:
    """py-spy's raw (collapsed) output: `frame;frame;...;leaf COUNT` per line, root first."""
    out: list[tuple[Stack, int]] = []
    for line in text.splitlines():
        stack_text, _, count = line.rstrip().rpartition(" ")
        if not stack_text or not count.isdigit():
            continue
        frames = tuple(f for f in (parse_frame(p) for p in stack_text.split(";"))
                       if f is not None)
        if frames:
            out.append((frames, int(count)))
    return out


# -- buckets ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """A frame matches when its file contains one of `files` and, if `functions` is given, its
    function is one of them: py-spy names methods by qualified name (`Class.method`,
    `outer.<locals>.inner`), and a pattern matches the whole name or its last dotted parts.
    `leaf` rules look at the leaf frame only."""

    bucket: str
    files: tuple[str, ...]
    functions: tuple[str, ...] = ()
    where: Literal["any", "leaf"] = "any"

    def matches(self, stack: Stack) -> bool:
        frames = stack[-1:] if self.where == "leaf" else stack
        return any(self.matches_frame(f) for f in frames)

    def matches_frame(self, frame: Frame) -> bool:
        if not any(part in frame.file for part in self.files):
            return False
        name = frame.function
        return not self.functions or any(name == f or name.endswith("." + f)
                                         for f in self.functions)


SEND = "uvicorn send / transport write"
LOOP = "event loop (uvloop, native)"
READ = "upstream read (proxy/upstream/http1.py)"
PARSE = "parse + assemble"
ENCODE = "encode + frame"
STORE = "event log / store"
GLUE = "stream generators"
SETUP = "request set-up and end"
OTHER = "other"

# The interpreter's entry down to the loop's `run`: every full stack starts with these frames.
# A sample whose leaf is one of them is the loop's own work (uvloop is native: its time shows in
# the Python frame that called into it).
ENTRY = Rule(LOOP, ("<frozen runpy>", "runpy.py", "proxy/__main__.py", "proxy/cli.py",
                    "uvicorn/server.py", "uvicorn/_compat.py", "uvicorn/main.py",
                    "asyncio/runners.py", "asyncio/base_events.py"), where="leaf")

# First match wins, so the order is the precedence. Stacks are tasks: the streaming task
# (`EventStream._stream` and the generators under it, once per upstream read), the request's
# task (`RequestResponseCycle.run_asgi`: middleware, route, the service's create, the access
# log), background tasks (the event-log flusher, lease renewals) and the loop's own callbacks
# (the upstream connection's `data_received`). The per-token work is matched first by its own
# modules, wherever it runs; what is left under the stream's generators is their own overhead
# (resuming each generator per batch); what is left in the request's task is set-up and end.
RULES: tuple[Rule, ...] = (
    # uvicorn's `send` and the wrappers of it that every body chunk passes; uvloop's
    # transport.write is native, so its time is the leaf `RequestResponseCycle.send`'s own.
    Rule(SEND, ("uvicorn/protocols/http/",), ("RequestResponseCycle.send",)),
    # A response's head held for its first body bytes: their one write (process/headwrite.py).
    Rule(SEND, ("proxy/process/headwrite.py",)),
    Rule(SEND, ("starlette/middleware/errors.py", "starlette/_exception_handler.py",
                "proxy/web/middleware/access.py", "proxy/web/middleware/front.py"),
         ("_send", "sender", "sent")),
    Rule(READ, ("proxy/upstream/http1.py",)),
    Rule(STORE, ("proxy/services/eventlog/", "proxy/store/", "redis/", "hiredis",
                 "proxy/services/responses/stored.py",
                 "proxy/services/jobs/")),
    # orjson is native: a `dumps` shows as the own time of the Python line calling it.
    Rule(ENCODE, ("proxy/services/generation/run.py",), ("Generation._encoded",)),
    Rule(ENCODE, ("proxy/core/events/sse.py",), ("frames",)),
    Rule(PARSE, ("proxy/core/events/chatstream.py", "proxy/core/events/sse.py",
                 "proxy/core/events/assembler/", "proxy/core/translate/chat.py",
                 "proxy/core/cache/completion.py")),
    Rule(GLUE, ("proxy/web/eventstream.py",), ("EventStream._stream",)),
    Rule(GLUE, ("proxy/services/responses/create.py",), ("_streamed",)),
    Rule(GLUE, ("proxy/services/generation/run.py",), ("Generation.run", "Generation._events",
                                                        "Generation._read")),
    Rule(GLUE, ("proxy/services/fleet/passthrough.py",), ("_relay",)),
    # The request's own path (not `proxy/services/process/loops.py`: background tasks stay
    # "other").
    Rule(SETUP, ("uvicorn/protocols/", "uvicorn/middleware/", "starlette/", "proxy/web/",
                 "proxy/services/responses/", "proxy/services/fleet/",
                 "proxy/services/generation/", "proxy/services/cache/",
                 "proxy/services/metering/", "proxy/runtime.py", "proxy/core/",
                 "proxy/upstream/client", "proxy/telemetry/metrics.py", "logging/")),
    ENTRY,
)
BUCKETS = (SEND, LOOP, READ, PARSE, ENCODE, STORE, GLUE, SETUP, OTHER)


def bucket_of(stack: Stack, rules: Sequence[Rule] = RULES) -> str:
    return next((rule.bucket for rule in rules if rule.matches(stack)), OTHER)


# -- the summary -----------------------------------------------------------------------------

@dataclass
class Summary:
    """Shares of one profile's samples (percent), and the row's CPU per token to convert."""

    name: str
    samples: int
    cpu_us_per_token: float | None  # the row's proxy CPU ms per 1k tokens
    torn_pct: float = 0.0  # samples whose stack does not reach the interpreter's entry
    buckets: dict[str, float] = field(default_factory=dict)
    own: list[tuple[str, float]] = field(default_factory=list)  # function (file), %
    inclusive: list[tuple[str, float]] = field(default_factory=list)
    lines: list[tuple[str, float]] = field(default_factory=list)  # function (file:line), %

    def us(self, pct: float) -> float | None:
        return pct / 100 * self.cpu_us_per_token if self.cpu_us_per_token is not None \
            else None


def summarize(name: str, stacks: Sequence[tuple[Stack, int]], cpu_ms_per_1k: float | None,
              top: int = TOP, rules: Sequence[Rule] = RULES) -> Summary:
    total = sum(count for _, count in stacks)
    summary = Summary(name, total, cpu_ms_per_1k)
    if not total:
        return summary
    buckets: Counter[str] = Counter()
    own: Counter[tuple[str, str]] = Counter()
    inclusive: Counter[tuple[str, str]] = Counter()
    lines: Counter[tuple[str, str, int | None]] = Counter()
    torn = 0
    for stack, count in stacks:
        buckets[bucket_of(stack, rules)] += count
        leaf = stack[-1]
        own[leaf.key] += count
        lines[(leaf.function, leaf.file, leaf.line)] += count
        # Once per sample however deep the recursion; the entry frames (in every full stack)
        # would only crowd the table.
        for key in {f.key for f in stack if not ENTRY.matches_frame(f)}:
            inclusive[key] += count
        if not ENTRY.matches_frame(stack[0]):
            torn += count

    def pct(n: int) -> float:
        return 100.0 * n / total

    summary.torn_pct = pct(torn)
    summary.buckets = {b: pct(buckets[b]) for b in BUCKETS}
    summary.own = [(f"{fn} ({file})", pct(n)) for (fn, file), n in own.most_common(top)]
    summary.inclusive = [(f"{fn} ({file})", pct(n))
                         for (fn, file), n in inclusive.most_common(top)]
    summary.lines = [(f"{fn} ({file}:{line})" if line is not None else f"{fn} ({file})",
                      pct(n)) for (fn, file, line), n in lines.most_common(top)]
    return summary


def _us(summary: Summary, pct: float) -> str:
    value = summary.us(pct)
    return "-" if value is None else f"{value:.2f}"


def markdown(summary: Summary) -> list[str]:
    cpu = ("-" if summary.cpu_us_per_token is None
           else f"{summary.cpu_us_per_token:.1f} µs per token")
    lines = [f"#### py-spy: {summary.name}", "",
             f"{summary.samples} samples at {RATE}/s while the proxy was on a CPU; the row's "
             f"proxy CPU: {cpu}. {summary.torn_pct:.0f}% of the stacks miss their root (py-spy "
             "`--nonblocking` reads stacks while they change; `--spy-blocking` does not, at a "
             "cost to the row): their own time counts, their buckets go by the frames read.",
             "",
             "| bucket | % of samples | µs per token |", "|---|---:|---:|"]
    lines += [f"| {b} | {p:.1f} | {_us(summary, p)} |" for b, p in summary.buckets.items()]
    for title, rows in (("own time (function)", summary.own),
                        ("inclusive time (function)", summary.inclusive),
                        ("own time (line)", summary.lines)):
        lines += ["", f"Top {len(rows)} by {title}:", "",
                  "| function | % | µs per token |", "|---|---:|---:|"]
        lines += [f"| `{label}` | {p:.1f} | {_us(summary, p)} |" for label, p in rows]
    return lines


# -- recording -------------------------------------------------------------------------------

@dataclass
class Recording:
    name: str
    raw: Path
    log: Path
    error: str | None = None

    def stacks(self) -> list[tuple[Stack, int]]:
        try:
            return parse_raw(self.raw.read_text(errors="replace"))
        except OSError:
            return []


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", name).strip("-")


@dataclass
class Spy:
    """Records one py-spy profile per row into `out_dir`."""

    exe: str
    out_dir: Path
    rate: int = RATE
    # False pauses the process for each sample: whole stacks, at a cost to the row
    nonblocking: bool = True
    recordings: list[Recording] = field(default_factory=list)

    @contextlib.contextmanager
    def record(self, name: str, pid: int, *, subprocesses: bool = False
               ) -> Iterator[Recording]:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        stem = self.out_dir / f"spy-{len(self.recordings) + 1:02d}-{_slug(name)}"
        recording = Recording(name, stem.with_suffix(".txt"), stem.with_suffix(".log"))
        self.recordings.append(recording)
        args = [self.exe, "record", "-p", str(pid), "-r", str(self.rate), "-f", "raw",
                "-o", str(recording.raw), *(["--nonblocking"] if self.nonblocking else []),
                *(["--subprocesses"] if subprocesses else [])]
        with open(recording.log, "wb") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
            try:
                yield recording
            finally:
                recording.error = _stop(proc)
        if recording.error is None and not recording.raw.exists():
            recording.error = f"py-spy wrote no profile (see {recording.log})"


def _stop(proc: subprocess.Popen[bytes]) -> str | None:
    """SIGINT (py-spy then writes its file), bounded; SIGKILL past the bound."""
    if proc.poll() is not None:
        return f"py-spy exited early with {proc.returncode}"
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        return f"py-spy did not stop within {STOP_TIMEOUT:g} s"
    return None


def write_markdown(path: Path, summaries: Sequence[Summary], header: Sequence[str] = ()
                   ) -> None:
    lines = list(header)
    for summary in summaries:
        lines += ["", *markdown(summary)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines).lstrip("\n") + "\n")


def results_path(results_dir: Path, prefix: str = "spy") -> Path:
    return results_dir / f"{prefix}-{time.strftime('%Y%m%dT%H%M%S')}.md"
