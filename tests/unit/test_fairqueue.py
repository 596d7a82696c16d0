"""The fair queue's order: priority first, round robin between tenants, FIFO within one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.fleet.fairqueue import FairQueue


def drain(queue: FairQueue[str]) -> list[str]:
    out: list[str] = []
    while (entry := queue.pop()) is not None:
        out.append(entry)
    return out


def test_one_tenants_burst_does_not_starve_another() -> None:
    queue: FairQueue[str] = FairQueue()
    for n in range(5):
        queue.push("a", f"a{n}")
    queue.push("b", "b0")
    queue.push("c", "c0")
    assert drain(queue) == ["a0", "b0", "c0", "a1", "a2", "a3", "a4"]


def test_priority_goes_first_and_is_fair_within_its_tier() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("a", "a0")
    queue.push("a", "pa0", priority=True)
    queue.push("a", "pa1", priority=True)
    queue.push("b", "pb0", priority=True)
    queue.push("b", "b0")
    assert drain(queue) == ["pa0", "pb0", "pa1", "a0", "b0"]


def test_remove_takes_an_entry_out_at_once() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("a", "a0")
    queue.push("b", "b0")
    assert queue.remove("a", "a0") and len(queue) == 1
    assert not queue.remove("a", "a0")  # already gone
    assert not queue.remove("b", "b0", priority=True)  # not in that tier
    assert drain(queue) == ["b0"] and len(queue) == 0


@given(st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), max_size=40))
def test_every_entry_comes_out_once_priority_first_fifo_per_tenant(
        pushes: list[tuple[str, bool]]) -> None:
    queue: FairQueue[str] = FairQueue()
    entries = []
    for n, (tenant, priority) in enumerate(pushes):
        entry = f"{tenant}{n}{'p' if priority else ''}"
        queue.push(tenant, entry, priority=priority)
        entries.append(entry)
    assert len(queue) == len(entries)
    out = drain(queue)
    assert sorted(out) == sorted(entries)
    tiers = [e.endswith("p") for e in out]
    assert tiers == sorted(tiers, reverse=True)  # every priority entry before any other
    for tenant in "abc":
        for tier in (True, False):
            mine = [e for e in entries if e[0] == tenant and e.endswith("p") == tier]
            assert [e for e in out if e in mine] == mine


def test_the_fleet_files_max_concurrency_is_the_replica_cap() -> None:
    from proxy.services.fleet.admission import replica_cap
    from proxy.services.fleet.fleet import Replica

    assert replica_cap(Replica("http://a", max_concurrency=3), 64) == 3
    assert replica_cap(Replica("http://b"), 64) == 64


def test_without_a_configured_cap_the_replicas_own_queue_sets_it() -> None:
    from proxy.core.fleet.replicaload import Signal
    from proxy.services.fleet.admission import ADAPTIVE_MARGIN, replica_cap
    from proxy.services.fleet.fleet import Replica

    assert replica_cap(Replica("http://a"), None) is None  # no signal: nothing to go by
    idle = Replica("http://b", signal=Signal(running=700, waiting=0))
    assert replica_cap(idle, None) is None
    busy = Replica("http://c", signal=Signal(running=256, waiting=9))
    assert replica_cap(busy, None) == 256 + ADAPTIVE_MARGIN
    assert replica_cap(busy, 8) == 8  # an explicit cap stays fixed
