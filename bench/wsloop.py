"""`python -m bench.wsloop` (run by `make bench`): an agent's tool-calling loop over the
WebSocket mode against the same loop over HTTP+SSE, end-to-end time per step.

Servers: one redis-server, the simulator (no token delay) and one proxy. One loop is `--steps`
steps (default 20) of what an agent does: send a create, read its events to the terminal one,
take the function call the simulator made (each step's user message carries `[[sim tools=1]]`),
and send its output back with the next step's user message, chained by
`previous_response_id`. Systems, one loop of each in turn so that machine noise falls on all:

- `http+sse store`: `POST /v1/responses` with `stream: true` on one keep-alive connection,
  `store: true` (the chain is read back from Redis each step);
- `ws store`: the same creates as `response.create` frames on one socket;
- `http+sse resend`: `store: false` over HTTP, so no chain: the whole conversation is sent
  again each step (what a stateless client such as Codex does over HTTP);
- `ws local`: on one socket with `store: false` (the chain from the connection's own memory,
  nothing written to Redis): what the WebSocket mode is for.

Every step is checked: it must end in `response.completed` with a `function_call`, or the run
stops, so a broken proxy cannot look fast. Reported per system: the median over loops of a
loop's time per step, and the p50/p90 of single steps. Bounded: `--loops` (default 7) and at
most `--max-seconds` in all. The machine is shared: compare systems within one run.

`--baseline REF`: REF's proxy (exported and run from its root, as `bench.versions` does) beside
this tree's, on the same simulator and redis-server (a database each), each loop's systems on
one proxy then the other, their order alternated loop by loop; a table of both proxies' time
and proxy CPU per step, and their ratios.

Cores as `bench.versions` gives them (`plan_pinning`): the proxies on the first, the simulator,
redis-server and this client on the other. Unpinned, the four processes' wake-ups on two cores
moved a system's time per step by ±10 % from run to run, and one proxy's against another's by
its scheduling rather than its work (docs/BENCHMARKS.md, "Round 4, the closing run").
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
from websockets.sync.client import ClientConnection, connect

from bench.options import module_parser
from bench.procs import CLK_TCK, Service, free_port, pin_self, plan_pinning
from bench.stack import HOST, Base, http_ok, redis_and_simulator
from bench.versions import export, tree_env

WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
_COMPLETED = b'{"type":"response.completed"'
_TERMINAL = tuple(f'{{"type":"response.{kind}"'.encode()
                  for kind in ("completed", "incomplete", "failed", "cancelled"))


class Transport(Protocol):
    def create(self, body: dict[str, Any]) -> bytes:
        """Sends one create and returns its terminal event's JSON."""

    def close(self) -> None: ...


class Sse:
    """Streamed creates on one keep-alive HTTP/1.1 connection."""

    def __init__(self, port: int) -> None:
        self._conn = http.client.HTTPConnection(HOST, port, timeout=60)

    def create(self, body: dict[str, Any]) -> bytes:
        self._conn.request("POST", "/v1/responses", orjson.dumps({**body, "stream": True}),
                           {"content-type": "application/json"})
        response = self._conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {data[:300]!r}")
        # The last `data:` line is the terminal event (no `[DONE]` on Responses streams).
        last = data.rstrip().rsplit(b"\ndata: ", 1)[-1]
        return last.removeprefix(b"data: ")

    def close(self) -> None:
        self._conn.close()


class Socket:
    """`response.create` frames on one WebSocket."""

    def __init__(self, port: int) -> None:
        self._stack = contextlib.ExitStack()
        self._ws: ClientConnection = self._stack.enter_context(connect(
            f"ws://{HOST}:{port}/v1/responses", open_timeout=30, max_size=None))

    def create(self, body: dict[str, Any]) -> bytes:
        self._ws.send(orjson.dumps({"type": "response.create", **body}).decode())
        for _ in range(100_000):
            frame = self._ws.recv(timeout=60, decode=False)
            if frame.startswith(_TERMINAL) or frame.startswith(b'{"type":"error"'):
                return frame
        raise RuntimeError("no terminal event")

    def close(self) -> None:
        self._stack.close()


def run_loop(transport: Transport, steps: int, store: bool, tag: str,
             chained: bool = True) -> list[float]:
    """One agent loop; the milliseconds of each step (send to terminal event, parsed).
    `chained`: by `previous_response_id`; otherwise the whole conversation is sent each step."""
    times: list[float] = []
    previous: str | None = None
    output: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    for n in range(steps):
        ask = {"role": "user", "content": f"{tag} step {n}: call get_weather city=Oslo{n} "
                                          "[[sim tools=1]]"}
        body: dict[str, Any] = {"model": "sim-model", "store": store, "tools": [WEATHER],
                                "input": [*history, *output, ask]}
        if previous is not None and chained:
            body["previous_response_id"] = previous
        if not chained:
            history = body["input"]
        started = time.perf_counter()
        terminal = transport.create(body)
        if not terminal.startswith(_COMPLETED):
            raise RuntimeError(f"step {n}: {terminal[:300]!r}")
        response = orjson.loads(terminal)["response"]
        calls = [item for item in response["output"] if item["type"] == "function_call"]
        times.append((time.perf_counter() - started) * 1000)
        if len(calls) != 1:
            raise RuntimeError(f"step {n}: expected one function call, got {response['output']}")
        previous = response["id"]
        if not chained:
            history = [*history, *response["output"]]
        output = [{"type": "function_call_output", "call_id": calls[0]["call_id"],
                   "output": f"snow in Oslo{n}"}]
    return times


Make = Callable[[int], Transport]
# name: (transport, store, chained by previous_response_id)
SYSTEMS: dict[str, tuple[Make, bool, bool]] = {
    "http+sse store": (Sse, True, True),
    "ws store": (Socket, True, True),
    "http+sse resend": (Sse, False, False),
    "ws local": (Socket, False, True),
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(round(len(ordered) * q) - 1, 0)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench.wsloop", __doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--loops", type=int, default=7)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--baseline", help="another commit's proxy beside this tree's (the "
                        "same simulator and redis-server; each loop's proxies in turn, their "
                        "order alternated), with both proxies' CPU per step")
    options = parser.parse_args(argv)
    services: list[Service] = []
    tree: Path | None = None
    logs: Path | None = None
    pinning = plan_pinning()
    affinity = os.sched_getaffinity(0)  # this process's own, put back at the end
    try:
        base = redis_and_simulator("bench-wsloop-", services, pinning.load)
        if base is None:
            return 1
        logs = base.logs
        proxies = {"this tree": _proxy(base, services, None, 0, pinning.proxy)}
        if options.baseline:
            tree = Path(tempfile.mkdtemp(prefix="bench-wsloop-baseline-"))
            name = export(options.baseline, tree)  # before its proxy starts (bench.versions)
            proxies[name] = _proxy(base, services, tree, 1, pinning.proxy)
        pin_self(pinning.load)
        print(f"bench.wsloop: a {options.steps}-step tool-calling loop, {options.loops} loops "
              f"per system at most, {options.max_seconds:.0f} s in all at most; "
              f"{pinning.note}; shared machine: compare systems within one run")
        rows = _run(proxies, options.steps, options.loops, options.max_seconds)
        if len(proxies) == 1:
            _print(rows["this tree"])
        else:
            _print_beside(rows)
    finally:
        pin_self(frozenset(affinity))
        for service in reversed(services):
            service.stop()
        if logs is not None:
            shutil.rmtree(logs, ignore_errors=True)
        if tree is not None:
            shutil.rmtree(tree, ignore_errors=True)
    return 0


def _proxy(base: Base, services: list[Service], tree: Path | None, db: int,
           cores: frozenset[int] | None = None) -> tuple[Service, int]:
    """A proxy on the stack's simulator and redis-server (`tree`: another commit's, run from
    its root as bench.versions runs it; `db`: its own Redis database; `cores`: its core)."""
    port = free_port()
    env = dict(base.env) if tree is None else tree_env(tree, base.env)
    proxy = Service(f"proxy-{db}", [
        sys.executable, "-m", "proxy", "serve", "--host", HOST, "--port", str(port),
        "--upstream", f"http://{HOST}:{base.sim_port}",
        "--redis-url", f"redis://{HOST}:{base.redis_port}/{db}"],
        base.logs / f"proxy-{db}.log", cores, env, cwd=tree)
    services.append(proxy.start(lambda: http_ok(port, "/readyz")))
    return proxy, port


@dataclass
class _Row:
    per_step: list[float] = field(default_factory=list)  # each loop's mean, ms
    steps: list[float] = field(default_factory=list)  # every step, ms
    ticks: int = 0  # the proxy's CPU over this system's loops


def _run(proxies: dict[str, tuple[Service, int]], steps: int, loops: int,
         max_seconds: float) -> dict[str, dict[str, _Row]]:
    transports = {(name, system): make(port) for name, (_, port) in proxies.items()
                  for system, (make, _, _) in SYSTEMS.items()}
    for (_, system), transport in transports.items():  # warm up: connections, imports, caches
        _, store, chained = SYSTEMS[system]
        run_loop(transport, 2, store, f"warm {system}", chained)
    rows = {name: {system: _Row() for system in SYSTEMS} for name in proxies}
    names = list(proxies)
    deadline = time.monotonic() + max_seconds
    for loop in range(loops):
        if loop and time.monotonic() > deadline:
            break
        for name in names if loop % 2 == 0 else names[::-1]:
            proxy = proxies[name][0]
            for system, (_, store, chained) in SYSTEMS.items():
                row, before = rows[name][system], proxy.cpu_ticks()
                times = run_loop(transports[(name, system)], steps, store,
                                 f"{system} {loop}", chained)
                row.ticks += proxy.cpu_ticks() - before
                row.per_step.append(sum(times) / len(times))
                row.steps.extend(times)
    for transport in transports.values():
        transport.close()
    return rows


def _print(rows: dict[str, _Row]) -> None:
    baseline = statistics.median(rows["http+sse store"].per_step)
    for name, row in rows.items():
        median = statistics.median(row.per_step)
        print(f"{name:16s} loops={len(row.per_step):2d}  per step {median:6.2f} ms "
              f"(median of loops; {median / baseline:4.2f}x http+sse)  single steps "
              f"p50 {statistics.median(row.steps):6.2f} ms  "
              f"p90 {percentile(row.steps, 0.9):6.2f} ms")


def _print_beside(rows: dict[str, dict[str, _Row]]) -> None:
    ours, other = rows
    print(f"| system | per step, this tree | {other} | ratio | proxy CPU per step, this tree "
          f"| {other} | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for system in SYSTEMS:
        mine, theirs = rows[ours][system], rows[other][system]
        step = [statistics.median(r.per_step) for r in (mine, theirs)]
        cpu = [r.ticks * 1000 / CLK_TCK / len(r.steps) for r in (mine, theirs)]
        print(f"| {system} | {step[0]:.2f} ms | {step[1]:.2f} ms | {step[0] / step[1]:.2f}x | "
              f"{cpu[0]:.2f} ms | {cpu[1]:.2f} ms | "
              f"{cpu[0] / cpu[1] if cpu[1] else 0:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
