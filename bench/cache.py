"""`python -m bench.cache` (run by `make bench` after the matrix): what the response cache costs
and saves, at one stream.

Servers: one redis-server, the simulator, and three proxies on the same Redis and simulator:
the cache off (the default: no flag), `--cache exact`, `--cache semantic --embedding-model
sim-model`; every other flag at its default (`MODE_FLAGS`). One client,
one keep-alive connection per proxy, one request at a time (`POST /v1/responses`, JSON,
`store: false`, a 16-token answer at no token delay, so the latency is the proxy's own work
plus one simulator answer). Rows:

- miss, off vs exact (and semantic): a new prompt every request, so every one misses; the
  requests of the systems alternate (A B C A B C ...), so machine noise falls on all alike. The
  exact miss's added cost is its p50 minus the p50 with the cache off (target: under 1 ms).
- exact hit: the same prompt again and again (every one served from the cache).
- semantic hit: the same prompt with a different run of spaces each time (a new exact key, the
  same embedding): a lookup that goes through the embedding call and the namespace.
- chat: the same two rows for `/v1/chat/completions`.

Bounded: `--requests` per row (default 300) and at most `--max-seconds` per row. The machine is
shared: figures move by a fraction of a millisecond between runs; compare p50s within one run.
"""

from __future__ import annotations

import http.client
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.options import module_parser
from bench.procs import Service, free_port
from bench.stack import HOST, http_ok, redis_and_simulator

ROOT = Path(__file__).resolve().parents[1]
TARGET_MISS_MS = 1.0
# Each proxy's flags beyond its addresses: the cache mode it measures (off is the default, so
# none), and for semantic the embedding model it needs (there is no default one).
MODE_FLAGS = {"off": [], "exact": ["--cache", "exact"],
              "semantic": ["--cache", "semantic", "--embedding-model", "sim-model"]}


class Conn:
    """One keep-alive connection; `post` returns (milliseconds, x-proxy-cache)."""

    def __init__(self, port: int) -> None:
        self._conn = http.client.HTTPConnection(HOST, port, timeout=30)

    def post(self, path: str, body: dict[str, Any]) -> tuple[float, str]:
        data = orjson.dumps(body)
        started = time.perf_counter()
        self._conn.request("POST", path, data, {"content-type": "application/json"})
        response = self._conn.getresponse()
        response.read()
        elapsed = (time.perf_counter() - started) * 1000
        if response.status != 200:
            raise RuntimeError(f"{path}: HTTP {response.status}")
        return elapsed, response.getheader("x-proxy-cache") or "-"

    def close(self) -> None:
        self._conn.close()


def responses(prompt: str) -> tuple[str, dict[str, Any]]:
    return "/v1/responses", {"model": "sim-model", "store": False,
                             "input": f"{prompt} [[sim tokens=16]]"}


def chat(prompt: str) -> tuple[str, dict[str, Any]]:
    return "/v1/chat/completions", {"model": "sim-model", "messages": [
        {"role": "user", "content": f"{prompt} [[sim tokens=16]]"}]}


Request = Callable[[str], tuple[str, dict[str, Any]]]
Prompt = Callable[[int], str]


def run_row(conns: Sequence[Conn], make: Request, prompt: Prompt, expect: str | None,
            requests: int, max_seconds: float) -> list[list[float]]:
    """Each connection in turn, `requests` rounds (or until `max_seconds`)."""
    samples: list[list[float]] = [[] for _ in conns]
    deadline = time.monotonic() + max_seconds
    for n in range(requests):
        if time.monotonic() > deadline:
            break
        for i, conn in enumerate(conns):
            path, body = make(prompt(n))
            ms, state = conn.post(path, body)
            if expect is not None and i > 0 and state != expect:
                raise RuntimeError(f"expected a cache {expect}, got {state}")
            samples[i].append(ms)
    return samples


def always(text: str) -> Prompt:
    return lambda n: text


def respaced(text: str) -> Prompt:
    """The same words with a different run of spaces each time: a new exact key, the same
    embedding (the simulator collapses whitespace) and the same guard."""
    return lambda n: text.replace(" ", " " * (2 + n % 50), 1)


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[int(len(ordered) * 0.9) - 1] if ordered else 0.0
    return (f"n={len(values):4d}  p50 {statistics.median(values):6.2f} ms  "
            f"p90 {p90:6.2f} ms  mean {statistics.fmean(values):6.2f} ms")


def ready(port: int) -> Callable[[], bool]:
    return lambda: http_ok(port, "/readyz")


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench.cache", __doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    options = parser.parse_args(argv)
    services: list[Service] = []
    try:
        base = redis_and_simulator("bench-cache-", services)
        if base is None:
            return 1
        logs, env, redis_port, sim_port = base.logs, base.env, base.redis_port, base.sim_port
        ports: dict[str, int] = {}
        for name, flags in MODE_FLAGS.items():
            port = ports[name] = free_port()
            proxy = Service(f"proxy-{name}", [
                sys.executable, "-m", "proxy", "serve", "--host", HOST, "--port", str(port),
                "--upstream", f"http://{HOST}:{sim_port}",
                "--redis-url", f"redis://{HOST}:{redis_port}/0", *flags],
                logs / f"proxy-{name}.log", env=env)
            services.append(proxy.start(ready(port)))
        conns = {name: Conn(port) for name, port in ports.items()}
        run = uuid.uuid4().hex[:8]
        bounded = (options.requests, options.max_seconds)
        print(f"bench.cache: 1 stream, {options.requests} requests per row at most, "
              f"{options.max_seconds:.0f} s per row at most; shared machine: compare within "
              "one run; proxy flags: " + "; ".join(
                  f"{name}: {' '.join(flags) or 'none (the default)'}"
                  for name, flags in MODE_FLAGS.items()))
        for label, make in (("responses", responses), ("chat", chat)):
            run_row(list(conns.values()), make, lambda n: f"warm {uuid.uuid4().hex}", None, 30,
                    10)
            order = ["off", "exact", "semantic"]
            miss = run_row([conns[m] for m in order], make,
                           lambda n: f"miss {uuid.uuid4().hex} {uuid.uuid4().hex}", "miss",
                           *bounded)
            for name, values in zip(order, miss, strict=True):
                print(f"{label:9s} {name:8s} miss  {summary(values)}")
            added = statistics.median(miss[1]) - statistics.median(miss[0])
            semantic_added = statistics.median(miss[2]) - statistics.median(miss[0])
            verdict = "met" if added < TARGET_MISS_MS else "NOT met"
            print(f"{label:9s} exact miss adds {added:+.2f} ms over cache off (target < "
                  f"{TARGET_MISS_MS:.0f} ms: {verdict}); semantic miss adds "
                  f"{semantic_added:+.2f} ms (an embedding call and a namespace read)")
            same = f"hit {label} {run}"
            conns["exact"].post(*make(same))
            time.sleep(0.2)  # the write runs after the answer
            hits = run_row([conns["exact"]], make, always(same), None, *bounded)[0]
            print(f"{label:9s} exact    hit   {summary(hits)}")
            # Its own prompt: the proxies share one Redis, and an exact hit adds no vector.
            near = f"semantic {label} {run}"
            conns["semantic"].post(*make(near))
            time.sleep(0.2)
            spaced = run_row([conns["off"], conns["semantic"]], make, respaced(near), "hit",
                             *bounded)[1]
            print(f"{label:9s} semantic hit   {summary(spaced)}")
        for conn in conns.values():
            conn.close()
    finally:
        for service in reversed(services):
            service.stop()
        shutil.rmtree(logs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
