"""`LedgerView`: on a Redis Cluster, what a key holds in each of its storage ledgers (the untagged
one: files, prompts; one per shard tag: its responses and conversations, keys.py), for the
budget checks.

Why a view and not a read per check: a key's ledgers sit on every primary, and every stored
create checks the budget (1 GiB per key by default): a fresh sum would be 33 reads over every
node per create, and a create would fail whenever any one primary is failing over. So:
- the sum is read (one pipeline per node) at most once per `FRESH_SECONDS` per key, and this
  instance's own writes update it at once (a create notes its tag's new total; a conversation
  write or a delete drops the key's view, read again at its next check);
- a failed read falls back to a view up to `STALE_SECONDS` old (a primary failing over does not
  fail every budgeted create), then fails (503);
- the tag a script writes under is checked exactly, inside the script (ledger.py): only the
  other tags' bytes come from the view.
How exact: as on one primary (the write that crosses the budget passes), plus what the key
stored under other tags through other instances in the last `FRESH_SECONDS`.
Bounded: views of at most `MAX_KEYS` keys (forgotten whole past it).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from proxy.core.errors import StoreUnavailable

FRESH_SECONDS = 1.0
STALE_SECONDS = 30.0
MAX_KEYS = 10_000

ByTag = dict[str | None, int]  # ledger (None: the untagged one) -> bytes held


class LedgerView:
    def __init__(self, read: Callable[[str], Awaitable[ByTag]], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read  # every ledger of a key, read now
        self._clock = clock
        self._seen: dict[str, tuple[float, ByTag]] = {}

    async def held(self, tenant: str) -> ByTag:
        now = self._clock()
        seen = self._seen.get(tenant)
        if seen is not None and now - seen[0] < FRESH_SECONDS:
            return seen[1]
        try:
            by_tag = await self._read(tenant)
        except StoreUnavailable:
            if seen is not None and now - seen[0] < STALE_SECONDS:
                return seen[1]
            raise
        if len(self._seen) >= MAX_KEYS:
            self._seen.clear()
        self._seen[tenant] = (now, by_tag)
        return by_tag

    async def elsewhere(self, tenant: str, tag: str | None) -> int:
        """Bytes the key holds in every ledger but `tag`'s."""
        return sum(held for other, held in (await self.held(tenant)).items() if other != tag)

    def note(self, tenant: str, tag: str | None, held: int) -> None:
        """This instance just left `held` bytes in `tag`'s ledger."""
        seen = self._seen.get(tenant)
        if seen is not None:
            seen[1][tag] = held

    def forget(self, tenant: str) -> None:
        self._seen.pop(tenant, None)
