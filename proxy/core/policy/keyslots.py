"""At most `per_key` of something held at once by one key (WebSocket connections,
file uploads). Pure and per process: a count by key, taken and given back by the caller, which
gives back in a `finally` so every way a holder ends frees its place.

Per process on purpose: what a held connection costs (a descriptor, a task, its memory of
chains) is this process's; counting across instances would need leases in the shared store
renewed while a socket lives and a round trip per handshake, for a bound that the number of
instances multiplies only by a known factor.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class KeySlots:
    def __init__(self, per_key: int) -> None:
        self.per_key = per_key
        self._by_key: dict[str, int] = {}  # only keys holding at least one

    def held(self, tenant: str) -> int:
        return self._by_key.get(tenant, 0)

    @property
    def total(self) -> int:
        """Places held by every key together."""
        return sum(self._by_key.values())

    @contextlib.contextmanager
    def taken(self, tenant: str) -> Iterator[bool]:
        """Yields whether a place was free (and is now held until the block ends)."""
        mine = self._by_key.get(tenant, 0)
        if mine >= self.per_key:
            yield False
            return
        self._by_key[tenant] = mine + 1
        try:
            yield True
        finally:
            left = self._by_key[tenant] - 1
            if left:
                self._by_key[tenant] = left
            else:
                del self._by_key[tenant]
