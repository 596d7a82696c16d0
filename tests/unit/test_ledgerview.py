"""store/budget/ledgerview.py: a key's ledgers on a cluster, read at most once a second, kept
current by this instance's own writes, and good for a while when a primary fails over."""

from __future__ import annotations

import pytest

from proxy.core.errors import StoreUnavailable
from proxy.store.budget.ledgerview import FRESH_SECONDS, STALE_SECONDS, ByTag, LedgerView


class Ledgers:
    def __init__(self) -> None:
        self.held: ByTag = {None: 10, "a": 100, "b": 1000}
        self.reads = 0
        self.down = False

    async def read(self, tenant: str) -> ByTag:
        self.reads += 1
        if self.down:
            raise StoreUnavailable("The store is unavailable (ConnectionError).")
        return dict(self.held)


async def test_read_once_per_second_and_own_writes_seen_at_once() -> None:
    ledgers, now = Ledgers(), [0.0]
    view = LedgerView(ledgers.read, clock=lambda: now[0])
    assert await view.elsewhere("k", "a") == 1010
    ledgers.held["b"] = 5000  # another instance wrote under tag b
    view.note("k", "a", 300)  # this one under tag a
    assert await view.elsewhere("k", "b") == 310 and ledgers.reads == 1
    now[0] += FRESH_SECONDS
    assert await view.elsewhere("k", "a") == 5010 and ledgers.reads == 2
    view.forget("k")
    assert sum((await view.held("k")).values()) == 5110 and ledgers.reads == 3


async def test_a_failed_read_falls_back_to_a_recent_view_then_fails() -> None:
    ledgers, now = Ledgers(), [0.0]
    view = LedgerView(ledgers.read, clock=lambda: now[0])
    await view.held("k")
    ledgers.down = True
    now[0] += FRESH_SECONDS
    assert await view.elsewhere("k", None) == 1100  # a primary failing over: the last view
    now[0] += STALE_SECONDS
    with pytest.raises(StoreUnavailable):
        await view.held("k")
    with pytest.raises(StoreUnavailable):
        await view.held("never-seen")
