"""The anchors' own shape: the table `python -m bench.scenarios` calls "anchors".

The gateways users compare with publish one shape: 50 concurrent clients, non-streamed
`/v1/responses`, short answers, requests per second and the latency a gateway adds over calling
the upstream directly (LiteLLM's Rust-against-Python post: +8 ms p95 at 6,782 req/s against
+130 ms at 453 req/s; Bifrost: 11 µs per request at 5k RPS). Our rows in that shape, through
`serve --workers 1` and `--workers 2` (the scenarios' unpinned "w1"/"w2" proxies, each process
on either core, beside the simulator, Redis and the load generator):

    direct-json            the simulator's own non-streamed chat answer (the upstream alone)
    responses-json         non-streamed POST /v1/responses, store: false
    responses-store-json   the same with store: true (the response written to Redis)

Each proxy's rows follow a direct row of their own, so "added" latency (the proxy row's p50/p95
minus that direct row's) is measured minutes, not an hour, apart. Requests per second per
proxy core divides the row's requests per second by the proxy's CPU over the window (its
processes counted together), so it does not depend on how busy the load side left the cores.
Short answers: `sizes.short_tokens` tokens at 0 ms/token (the simulator answers at once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from bench.stats import cell as _n

if TYPE_CHECKING:
    from bench.scenarios import Measured

TABLE = "anchors"
CONCURRENCY = 50
DIRECT = "direct-json"
SYSTEMS = (DIRECT, "responses-json", "responses-store-json")


def per_core(m: Measured) -> float | None:
    """Requests per second per proxy core: requests/s over the proxy's share of a core."""
    busy = m.row.proxy_core_pct
    return m.row.rps / (busy / 100) if busy else None


def added(m: Measured, direct: Measured | None, q: str) -> float | None:
    mine = m.row.latency_ms.get(q)
    base = direct.row.latency_ms.get(q) if direct is not None else None
    return mine - base if mine is not None and base is not None else None



def table(results: Sequence[Measured], tokens: int) -> list[str]:
    rows = [m for m in results if m.table == TABLE]
    if not rows:
        return []
    lines = ["", f"**The anchors' shape: {CONCURRENCY} concurrent clients, non-streamed "
                 f"`/v1/responses`, {tokens}-token answers at 0 ms/token; `serve --workers 1` "
                 "and `2`, unpinned; added latency against the direct row just before**", "",
             "| system | processes | req/s | req/s per proxy core | latency p50 ms "
             "| p95 ms | added p50 ms | added p95 ms | proxy CPU % of a core | errors |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    direct: Measured | None = None
    for m in rows:
        r = m.row
        if r.system == DIRECT:
            direct = m
        processes = m.label[1:] if m.label.startswith("w") else "-"
        mine = r.system != DIRECT
        lines.append(
            f"| {r.system} | {processes} | {r.rps:.0f} | {_n(per_core(m), 0) if mine else '-'} "
            f"| {_n(r.latency_ms.get('p50'))} | {_n(r.latency_ms.get('p95'))} "
            f"| {_n(added(m, direct, 'p50'), 1, True) if mine else '-'} "
            f"| {_n(added(m, direct, 'p95'), 1, True) if mine else '-'} "
            f"| {_n(r.proxy_core_pct, 0) if mine else '-'} | {r.errors} |")
    return lines
