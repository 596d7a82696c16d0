"""A queue that is fair between tenants: who is served next when capacity frees up.

Order of `pop()`:
  - priority entries (`service_tier: "priority"`) before every other entry;
  - within a tier, round robin between tenants: each tenant has its own FIFO sub-queue, and
    the tenant served last goes to the back of the rotation, so one key's burst of a thousand
    requests delays another key's single request by at most one turn per waiting tenant;
  - within a tenant, first come, first served.
Its length is bounded by the caller (services/fleet/admission.py bounds all its queues together).
`remove` takes out an entry that gave up (deadline, client gone) at once, so it never holds a
place. Pure: no clock, no I/O; entries are opaque and compared by identity.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Generic, TypeVar

T = TypeVar("T")


class _Tier(Generic[T]):
    """Tenants in rotation order, each with its FIFO of entries (never an empty one kept)."""

    def __init__(self) -> None:
        self.tenants: OrderedDict[str, deque[T]] = OrderedDict()

    def push(self, tenant: str, entry: T) -> None:
        self.tenants.setdefault(tenant, deque()).append(entry)

    def pop(self) -> T | None:
        if not self.tenants:
            return None
        tenant, entries = next(iter(self.tenants.items()))
        entry = entries.popleft()
        if entries:
            self.tenants.move_to_end(tenant)  # served: to the back of the rotation
        else:
            del self.tenants[tenant]
        return entry

    def remove(self, tenant: str, entry: T) -> bool:
        entries = self.tenants.get(tenant)
        if entries is None:
            return False
        for i, candidate in enumerate(entries):
            if candidate is entry:
                del entries[i]
                if not entries:
                    del self.tenants[tenant]
                return True
        return False


class FairQueue(Generic[T]):
    def __init__(self) -> None:
        self._length = 0
        self._priority: _Tier[T] = _Tier()
        self._default: _Tier[T] = _Tier()

    def __len__(self) -> int:
        return self._length

    def push(self, tenant: str, entry: T, *, priority: bool = False) -> None:
        (self._priority if priority else self._default).push(tenant, entry)
        self._length += 1

    def pop(self) -> T | None:
        """The next entry to serve, or None when empty."""
        entry = self._priority.pop()
        if entry is None:
            entry = self._default.pop()
        if entry is not None:
            self._length -= 1
        return entry

    def remove(self, tenant: str, entry: T, *, priority: bool = False) -> bool:
        """Take out an entry that gave up; False if it was not queued (already popped)."""
        removed = (self._priority if priority else self._default).remove(tenant, entry)
        if removed:
            self._length -= 1
        return removed
