"""`make fuzz`: the fuzzer for minutes against a real stack.

A redis-server, the simulator and a `responses-proxy serve` process (uvicorn; two API keys,
the exact cache on, a 1 MiB body limit so oversized bodies and frames are cheap to make), each
on a free loopback port. Every HTTP endpoint of docs/contract.md gets an equal share of
`FUZZ_SECONDS` (default 300), the WebSocket frames one more share; then `/healthz` and
`/readyz` must answer 200. Prints the cases run per endpoint as the Markdown table of
docs/RELIABILITY.md's "Fuzzing" section. Exits non-zero on the first failing case, printed.
"""

from __future__ import annotations

import os
import sys
import time

import httpx
from websockets.sync.client import connect

from tests.fuzz import harness
from tests.fuzz import strategies as s
from tests.support.servers import start_proxy, start_redis, start_simulator

KEY = "sk-fuzz-a"
OTHER = "sk-fuzz-b"
BODY_LIMIT = 1 << 20
WS_TARGET = "WebSocket frames on GET /v1/responses"


def fuzz_websocket(url: str, known: s.Known, writes: harness.Writes, tally: harness.Tally,
                   seconds: float) -> None:
    ws_url = url.replace("http://", "ws://") + "/v1/responses"

    ws = connect(ws_url, additional_headers={"authorization": f"Bearer {KEY}"},
                 open_timeout=10, close_timeout=5, max_size=None)
    try:
        harness.run_cases(s.ws_frames(known, BODY_LIMIT),
                          harness.ws_checker(ws, writes, tally, WS_TARGET), seconds=seconds)
    finally:
        ws.close()


def table(tally: harness.Tally, seconds: float, elapsed: float) -> str:
    lines = [f"Run: `make fuzz` with FUZZ_SECONDS={seconds:g} ({elapsed:.0f} s of wall time).",
             "", "| Endpoint | Cases | Accepted | Rejected (4xx, Redis checked) | 5xx |",
             "|---|---:|---:|---:|---:|"]
    for name, count in tally.cases.items():
        rejected = tally.rejected.get(name, 0)
        lines.append(f"| `{name}` | {count} | {count - rejected} | {rejected} | 0 |")
    rejected = sum(tally.rejected.values())
    lines.append(f"| **total** | **{tally.total}** | **{tally.total - rejected}** | "
                 f"**{rejected}** | **0** |")
    if tally.rechecked:
        seen = sorted({key for _, keys in tally.rechecked for _, key in keys})
        lines += ["", f"{len(tally.rechecked)} rejected cases saw a write of an earlier case "
                      f"in their window and were sent again, writing nothing ({', '.join(seen)})."]
    return "\n".join(lines)


def main() -> int:
    seconds = float(os.environ.get("FUZZ_SECONDS", "300"))
    redis_server = start_redis()
    simulator = start_simulator()
    redis_url = f"redis://127.0.0.1:{redis_server.port}/0"
    proxy = start_proxy(simulator.url, "--api-key", KEY, "--api-key", OTHER, "--cache", "exact",
                        "--max-body-bytes", str(BODY_LIMIT), redis_url=redis_url)
    writes = harness.Writes(redis_url)
    tally = harness.Tally()
    started = time.monotonic()
    try:
        with httpx.Client(base_url=proxy.url, timeout=120) as client:
            known = harness.make_known(client, KEY)
            targets = harness.http_targets(known, KEY)
            share = seconds / (len(targets) + 1)
            harness.fuzz_http(client, known, KEY, writes, tally, seconds=share)
            fuzz_websocket(proxy.url, known, writes, tally, share)
            harness.assert_healthy(client)
    except BaseException:
        print("proxy log tail:\n" + proxy.output(), file=sys.stderr)
        raise
    finally:
        writes.close()
        proxy.stop()
        simulator.stop()
        redis_server.stop()
    print(table(tally, seconds, time.monotonic() - started))
    if os.environ.get("FUZZ_STATUSES"):
        for name, statuses in tally.statuses.items():
            print(name, dict(sorted(statuses.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
