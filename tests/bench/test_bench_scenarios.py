"""`python -m bench.scenarios` and `python -m bench.appends` end to end, tiny: every table of
the scenarios get their rows (both Redis placements, the burst, the short answers, one and two
processes), with data, no errors and the CPU of proxy + Redis counted; the budgeted processes
rows (each proxy process in a cgroup of its own) where cgroups are writable, and one line
saying why not elsewhere."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil

import pytest
from redis.asyncio import Redis

from bench import appends, cgroups
from bench.scenarios import Scenarios, Sizes, tables
from bench.stack import HOST, redis_beside_proxy
from proxy.store import keys

pytestmark = [pytest.mark.e2e, pytest.mark.bench_rows]

TINY = Sizes(streams=4, tokens=8, delay=5.0, short_streams=2, process_streams=4,
             short_tokens=4, seconds=0.3, waves=1)


def test_every_scenario_table_has_its_rows() -> None:
    results = Scenarios(TINY, out=lambda _line: None,
                        only=("placement", "burst", "short", "processes", "anchors")).run()
    by_table: dict[str, list[tuple[str, str]]] = {}
    for m in results:
        by_table.setdefault(m.table, []).append((m.label, m.row.system))
        assert m.row.errors == 0, (m.table, m.label, m.row.system, m.row.error_kinds)
        if m.row.system.endswith("-json"):  # whole answers: counted as requests, not deltas
            assert m.row.completed_in_window > 0
        else:
            assert m.row.total_tokens > 0
    assert by_table["placement"] == [("-", "direct"), ("apart", "passthrough"),
                                     ("beside", "passthrough"), ("apart", "responses"),
                                     ("beside", "responses"), ("apart", "responses-store"),
                                     ("beside", "responses-store")]
    assert [s for _, s in by_table["burst"]] == ["direct", "passthrough", "responses",
                                                 "responses-store"]
    assert [s for _, s in by_table["short"]] == ["direct", "passthrough", "responses",
                                                 "responses-store"]
    assert by_table["processes"] == [("w1", "responses"), ("w2", "responses"),
                                     ("w1", "responses-store"), ("w2", "responses-store")]
    # the anchors' shape: whole answers, each proxy after a direct row of its own
    assert by_table["anchors"] == [("-", "direct-json"), ("w1", "responses-json"),
                                   ("w1", "responses-store-json"), ("-", "direct-json"),
                                   ("w2", "responses-json"), ("w2", "responses-store-json")]
    # Redis's CPU is counted for the stored rows (it did the work), and the two-process
    # proxy's CPU includes its children.
    stored = [m for m in results if m.row.system == "responses-store"]
    assert all(m.row.cpu_ticks.get("proxy", 0) > 0 for m in stored)
    two = [m for m in results if m.label == "w2"]
    assert all(m.requests_per_cpu_second is not None for m in two)
    text = "\n".join(tables(results, TINY))
    for title in ("Steady:", "Burst:", "Short answers:", "Processes:", "The anchors' shape:"):
        assert title in text
    # the burst targets are reported under the burst table (TINY: its streams x delay)
    assert "The burst targets" in text and "store on, Redis on the proxy's core" in text


REASON = cgroups.unavailable()


@pytest.mark.skipif(REASON is not None, reason=f"no CPU cgroups: {REASON}")
def test_budgeted_rows_put_each_proxy_process_under_its_own_quota() -> None:
    # 16 connections: SO_REUSEPORT hashes each to one of the two processes, and all 16 on one
    # (which would leave the other idle) has odds of 2 in 65,536; 4 would be 1 in 8.
    sizes = dataclasses.replace(TINY, process_streams=16, workers=(1, 2), stream_tokens=8,
                                stream_delay=5.0, streams_per_process=2)
    scenarios = Scenarios(sizes, out=lambda _line: None, only=("budgeted",), budget_cores=0.3)
    results = scenarios.run()
    rows = [m for m in results if m.table == "budgeted"]
    assert [(m.label, m.row.system, m.row.tokens, m.row.concurrency) for m in rows] == [
        ("b1", "responses", 4, 16), ("b2", "responses", 4, 16),
        ("b1", "responses-store", 4, 16), ("b2", "responses-store", 4, 16),
        # the streaming rows: streams per process x processes, each cell with its direct row
        ("-", "direct", 8, 2), ("b1", "responses", 8, 2), ("b1", "responses-store", 8, 2),
        ("-", "direct", 8, 4), ("b2", "responses", 8, 4), ("b2", "responses-store", 8, 4)]
    for m in rows:
        assert m.row.errors == 0, (m.label, m.row.system, m.row.error_kinds)
        if m.label == "-":
            continue
        names = [p.name for p in m.processes]
        assert names == (["main"] if m.label == "b1" else ["child1", "child2", "supervisor"])
        # every serving process ran under its quota during the row (CFS counted its periods)
        assert all(p.throttling.periods > 0 for p in m.processes if p.name != "supervisor")
        assert m.requests_per_proxy_cpu_second is not None
    # the derivation checked through one process, per system, against its own direct row
    checks = [(m.label, m.row.system) for m in results if m.table == "cores-check"]
    assert checks == [("-", "direct"), ("b1", "responses"), ("-", "direct"),
                      ("b1", "responses-store")]
    text = "\n".join(tables(results, sizes, budget_cores=0.3,
                             load_cores=scenarios.load_cores))
    assert "Processes with a CPU budget" in text
    assert "| responses-store | 4 tok x 0 ms | 2 | 0.60 | 16 |" in text
    assert "**Per core**" in text
    hierarchy = cgroups.hierarchy()
    assert not [p for p in hierarchy.root.iterdir()
                if p.name.startswith(f"{cgroups.PARENT_PREFIX}{os.getpid()}")]


def test_a_skipped_budgeted_table_says_why() -> None:
    text = tables([], TINY, skipped={"budgeted": "cgroups need root"})
    assert text[-1] == "Not run: cgroups need root."


def test_appends_compares_the_three_flush_methods() -> None:
    results = appends.run(streams=8, events=2, flushes=5, rounds=1)
    assert set(results) == set(appends.METHODS)
    for redis_ms, own_ms in results.values():
        assert redis_ms >= 0 and own_ms > 0
    assert len(appends.table(results)) == 2 + len(appends.METHODS)


def test_appends_writes_events_of_the_size_asked() -> None:
    for size in (24, appends.DELTA_BYTES, 400):
        event = appends._event(123, size)
        assert abs(len(event) - size) <= 3, (size, len(event))
    results = appends.run(streams=2, events=3, flushes=2, rounds=1, size=24)
    assert all(own_ms > 0 for _, own_ms in results.values())


def test_appends_methods_in_turn_each_write_their_events() -> None:
    # The flush script keeps the log's last number in the response hash: a set-up that kept
    # the hash left every method after the first script's finding all its events written.
    async def drive(port: int) -> dict[str, int]:
        client = Redis(host=HOST, port=port)
        writers = appends._writers(client, await appends._loaded(client))
        written: dict[str, int] = {}
        try:
            for _round in range(2):
                for method in ("one-call", "compact", "one-call"):
                    await appends._setup(client, 1)
                    await writers[method](appends._batch(1, 20, 0))
                    log = keys.response_log("resp_bench00000")
                    written[method] = await client.xlen(log)
        finally:
            await client.aclose()
        return written

    with redis_beside_proxy("test-appends-") as (_pid, port):
        assert asyncio.run(drive(port)) == {"one-call": 1, "compact": 1}  # one entry each


@pytest.mark.skipif(not (shutil.which("valgrind") and shutil.which("callgrind_control")),
                    reason="needs valgrind")
def test_appends_counts_redis_instructions_per_method() -> None:
    counted = appends.count(streams=2, events=20, flushes=2)
    assert set(counted) == set(appends.METHODS)
    assert all(n > 0 for n in counted.values())
    # A compact run hands Redis fewer bytes than the same run in full.
    assert counted["compact"] < counted["one-call"]
    assert len(appends.counted_table(counted)) == 2 + len(appends.METHODS)
