"""Flow control in front of the fleet: a request goes upstream only while a replica serving its
model has room; otherwise it waits in a bounded, fair queue, or gets a 429.

Rules:
  - room: some healthy replica serving the model carries fewer in-flight requests than its cap
    (`replica_cap`). The in-flight counts are the fleet's own, so every call of this process
    counts, admitted or not (tokenize, embeddings);
  - the cap: the fleet file's `max_concurrency`, else `--max-inflight-per-replica`, else
    adaptive: none while the replica's last /metrics scrape showed no waiting requests, and
    what it reported running (plus `ADAPTIVE_MARGIN`) while it did. A fixed default cap
    throttled healthy replicas: vLLM runs 256-1,024 sequences at once, and 64 per process cost
    256 streams 3/4 of their throughput (measured at default flags). Holding only while the
    replica itself queues loses nothing (a queued request waits there or here alike) and keeps
    fairness between keys
    where it matters: in our queue, where requests wait in fair order, not in vLLM's FIFO;
  - a request that finds room and nobody of its model waiting goes at once (no task, no timer);
    otherwise it queues: priority first, round robin between tenants (API keys), FIFO within
    one (core/fleet/fairqueue.py). Priority is `service_tier: "priority"` from a key whose keys-file
    entry grants it (`"priority": true`, `grants`); anyone else's ask is an ordinary request,
    or one key could push every other key's requests behind its own. Queues are per model, so a
    saturated model never holds up another one's requests;
  - bounds: at most `max_queued` foreground requests wait; each waits at most `timeout` seconds
    (then 429). A request that finds the queue full takes the place of the newest waiter of the
    key holding the most places, if that key holds at least two more than its own (that waiter
    gets the 429), else it gets the 429 at once: one key alone may fill the queue, yet it cannot
    shut another key out of it (the places tend to equal shares, as the round robin gives equal
    turns). Every 429 carries `Retry-After` and code `rate_limit_exceeded`. A client that
    leaves while queued (its task is cancelled) leaves the queue in the same step. Background
    jobs queue past `max_queued` (their number is bounded by the worker's concurrency) but not
    past `timeout`, and never lose their place;
  - wake-ups: an admitted call, wrapped by `watch`, hands its slot on when it closes; every
    waiter also re-checks every `RECHECK_S`, for room that appears without a close we see
    (a replica coming back, a call that was not admitted ending);
  - accounting: a waiter granted a slot is counted in `_granted` until its task resumes; the
    caller then opens its call at once (`fleet.open` counts it in-flight before its first
    await), so no slot is handed out twice. Callers must not await anything between `admit`
    and `fleet.open`.
Per process: the cap is per instance; across instances each replica's own metrics are the
shared view of its load.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from proxy.core.errors import RateLimited
from proxy.core.fleet.fairqueue import FairQueue
from proxy.core.policy.keysfile import KeysFile
from proxy.core.policy.tenancy import tenant_of
from proxy.services.fleet.fleet import Call, Fleet, Replica
from proxy.settings import FlowSettings

# While a replica reports waiting requests, this process may still add this many past what it
# reported running: its running count moves between scrapes, and a replica whose queue drains
# within the scrape interval should not idle while we wait for the next scrape.
ADAPTIVE_MARGIN = 8
DEFAULT_MAX_QUEUED = 1024
DEFAULT_TIMEOUT = 30.0
# The client has already waited (or the queue is long): a short hint spreads the retries
# without idling a fleet that frees slots every few hundred milliseconds.
RETRY_AFTER_S = 1
RECHECK_S = 0.25


def replica_cap(replica: Replica, default: int | None) -> int | None:
    """How many requests `replica` takes at once from this process (None: no cap). The one place
    to read it: the fleet file's per-replica `max_concurrency` overrides `default`
    (`--max-inflight-per-replica`); with neither, the replica's own queue decides (adaptive)."""
    if replica.max_concurrency:
        return replica.max_concurrency
    if default is not None:
        return default
    signal = replica.signal
    if signal is None or signal.waiting <= 0:
        return None
    return int(signal.running) + ADAPTIVE_MARGIN


@dataclass
class AdmittedCall(Call):
    """An admitted upstream call: closing it hands its slot to the next waiter."""

    released: Callable[[], None] | None = None

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            released, self.released = self.released, None
            if released is not None:
                released()


@dataclass(eq=False)
class _Waiter:
    tenant: str
    priority: bool
    future: asyncio.Future[None]
    model: str = ""
    bounded: bool = True  # counts against `max_queued` (background jobs do not)
    evicted: bool = False  # its place was given to another key's request (a 429)


class Admission:
    def __init__(self, fleet: Fleet, *, per_replica: int | None = None,
                 max_queued: int = DEFAULT_MAX_QUEUED, timeout: float = DEFAULT_TIMEOUT,
                 priority: frozenset[str] = frozenset()) -> None:
        self._fleet = fleet
        self._priority = priority  # tenants granted `service_tier: "priority"`
        self.per_replica = per_replica
        self.max_queued = max_queued
        self.timeout = timeout
        self._queues: dict[str, FairQueue[_Waiter]] = {}
        self._queued = 0
        # Each key's bounded waiters, oldest first, across models: whose place a newcomer
        # takes when the queue is full.
        self._places: dict[str, list[_Waiter]] = {}
        self._granted = 0  # woken waiters whose task has not resumed yet

    @classmethod
    def from_settings(cls, fleet: Fleet, flow: FlowSettings,
                      keys_file: KeysFile | None) -> Admission:
        """`keys_file`: whose `service_tier: "priority"` is honoured."""
        granted = frozenset(tenant_of(entry.key) for entry in keys_file.keys
                            if entry.priority) if keys_file is not None else frozenset()
        return cls(fleet, per_replica=flow.max_inflight_per_replica,
                   max_queued=flow.max_queued_requests, timeout=flow.queue_timeout,
                   priority=granted)

    def set_priority(self, tenants: frozenset[str]) -> None:
        """The keys changed (services/admin/keyring.py); waiters already queued keep their
        place."""
        self._priority = tenants

    def grants(self, tenant: str) -> bool:
        """The key may ask for `service_tier: "priority"` (no keys file: no key may)."""
        return tenant in self._priority

    @property
    def queued(self) -> int:
        return self._queued

    def room(self, model: str) -> bool:
        candidates = [r for r in self._fleet.replicas if r.healthy and r.serves(model)]
        if not candidates:
            return True  # nothing known to protect: the fleet's answer is the truthful one
        free = 0
        for replica in candidates:
            cap = replica_cap(replica, self.per_replica)
            if cap is None:
                return True
            free += max(0, cap - replica.in_flight)
        return free > self._granted

    async def admit(self, model: str, tenant: str, *, priority: bool = False,
                    bounded: bool = True, on_queue: Callable[[], None] | None = None) -> None:
        """Return when `model` has room for one more call (open it right away), or raise
        `RateLimited`. `bounded=False`: may queue past `max_queued` (background jobs).
        `on_queue`: called once before waiting (the request gives its set-up slot up)."""
        queue = self._queues.get(model)
        if not queue and self.room(model):
            return
        if bounded and self._queued >= self.max_queued:
            victim = self._victim(tenant)
            if victim is None:
                raise RateLimited(
                    f"The fleet serving '{model}' is saturated: every replica is at its limit "
                    f"of concurrent requests and {self._queued} requests are already waiting. "
                    f"Retry after {RETRY_AFTER_S} s.", retry_after=RETRY_AFTER_S)
            self._evict(victim)
        if on_queue is not None:
            on_queue()
        loop = asyncio.get_running_loop()
        waiter = _Waiter(tenant, priority, loop.create_future(), model, bounded)
        queue = self._queues.setdefault(model, FairQueue())
        queue.push(tenant, waiter, priority=priority)
        self._queued += 1
        if bounded:
            self._places.setdefault(tenant, []).append(waiter)
        deadline = loop.time() + self.timeout
        try:
            self._pump(model)
            while not waiter.future.done():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise RateLimited(
                        f"The fleet serving '{model}' is saturated: no replica had room for "
                        f"this request within {self.timeout:g} s. Retry after {RETRY_AFTER_S} "
                        "s.", retry_after=RETRY_AFTER_S)
                await asyncio.wait((waiter.future,), timeout=min(remaining, RECHECK_S))
                self._pump(model)
            if waiter.evicted:
                raise RateLimited(
                    f"The fleet serving '{model}' is saturated and its queue is full: this key "
                    "holds the most places in it, and this request's place went to another "
                    f"key's. Retry after {RETRY_AFTER_S} s.", retry_after=RETRY_AFTER_S)
        finally:
            if waiter.evicted:
                pass  # already out of the queue and its counts (`_evict`)
            elif waiter.future.done():
                self._granted -= 1
                # After our caller's call is counted in-flight (or, if we are leaving, with our
                # unused slot): the next waiters may go.
                loop.call_soon(self.pump_all)
            else:
                waiter.future.cancel()
                queue.remove(tenant, waiter, priority=priority)
                self._queued -= 1
                self._unplace(waiter)
                self._forget_if_empty(model)

    def _victim(self, tenant: str) -> _Waiter | None:
        """The waiter whose place a request of `tenant` takes in a full queue: the newest of the
        key holding the most places, if it holds at least two more than `tenant`."""
        if not self._places:
            return None
        most = max(self._places.values(), key=len)
        if len(most) < len(self._places.get(tenant, ())) + 2:
            return None
        return most[-1]

    def _evict(self, waiter: _Waiter) -> None:
        queue = self._queues[waiter.model]
        queue.remove(waiter.tenant, waiter, priority=waiter.priority)
        self._queued -= 1
        self._unplace(waiter)
        self._forget_if_empty(waiter.model)
        waiter.evicted = True
        waiter.future.set_result(None)  # wakes it: it raises its 429

    def _unplace(self, waiter: _Waiter) -> None:
        if not waiter.bounded:
            return
        places = self._places[waiter.tenant]
        places.remove(waiter)
        if not places:
            del self._places[waiter.tenant]

    def watch(self, call: Call) -> Call:
        """`call` (just opened after `admit`), made to hand its slot on when it closes."""
        # The call's state copied in one `dict` update: `dataclasses.fields` and a keyword
        # `__init__` per create cost ~1.4 µs, this ~0.4 (neither class has a `__post_init__`).
        admitted = object.__new__(AdmittedCall)
        admitted.__dict__.update(call.__dict__)
        admitted.released = self.pump_all
        return admitted

    def pump_all(self) -> None:
        for model in list(self._queues):
            self._pump(model)

    def _pump(self, model: str) -> None:
        """Grant slots to the next waiters of `model`, in fair order, while it has room."""
        queue = self._queues.get(model)
        while queue and self.room(model):
            waiter = queue.pop()
            assert waiter is not None
            self._queued -= 1
            self._unplace(waiter)
            self._granted += 1
            waiter.future.set_result(None)
        self._forget_if_empty(model)

    def _forget_if_empty(self, model: str) -> None:
        queue = self._queues.get(model)
        if queue is not None and not queue:
            del self._queues[model]
