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
"""

from __future__ import annotations

import contextlib
import http.client
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import orjson
from websockets.sync.client import ClientConnection, connect

from bench.options import module_parser
from bench.procs import Service, free_port
from bench.stack import HOST, http_ok, redis_and_simulator

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
    options = parser.parse_args(argv)
    services: list[Service] = []
    try:
        base = redis_and_simulator("bench-wsloop-", services)
        if base is None:
            return 1
        logs, env, redis_port, sim_port = base.logs, base.env, base.redis_port, base.sim_port
        port = free_port()
        proxy = Service("proxy", [
            sys.executable, "-m", "proxy", "serve", "--host", HOST, "--port", str(port),
            "--upstream", f"http://{HOST}:{sim_port}",
            "--redis-url", f"redis://{HOST}:{redis_port}/0"], logs / "proxy.log", env=env)
        services.append(proxy.start(lambda: http_ok(port, "/readyz")))
        print(f"bench.wsloop: a {options.steps}-step tool-calling loop, {options.loops} loops "
              f"per system at most, {options.max_seconds:.0f} s in all at most; shared "
              "machine: compare systems within one run")
        transports = {name: make(port) for name, (make, _, _) in SYSTEMS.items()}
        for name, transport in transports.items():  # warm up: connections, imports, caches
            _, store, chained = SYSTEMS[name]
            run_loop(transport, 2, store, f"warm {name}", chained)
        per_step: dict[str, list[float]] = {name: [] for name in SYSTEMS}
        steps: dict[str, list[float]] = {name: [] for name in SYSTEMS}
        deadline = time.monotonic() + options.max_seconds
        for loop in range(options.loops):
            if loop and time.monotonic() > deadline:
                break
            for name, transport in transports.items():
                _, store, chained = SYSTEMS[name]
                times = run_loop(transport, options.steps, store, f"{name} {loop}", chained)
                per_step[name].append(sum(times) / len(times))
                steps[name].extend(times)
        for transport in transports.values():
            transport.close()
        baseline = statistics.median(per_step["http+sse store"])
        for name in SYSTEMS:
            median = statistics.median(per_step[name])
            print(f"{name:16s} loops={len(per_step[name]):2d}  per step {median:6.2f} ms "
                  f"(median of loops; {median / baseline:4.2f}x http+sse)  single steps "
                  f"p50 {statistics.median(steps[name]):6.2f} ms  "
                  f"p90 {percentile(steps[name], 0.9):6.2f} ms")
    finally:
        for service in reversed(services):
            service.stop()
        shutil.rmtree(logs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
