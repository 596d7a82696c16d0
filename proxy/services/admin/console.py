"""What the console shows (web/routes/console.py), each an admin-key read off the request path:
the fleet as this process sees it, the job queue (instance-wide, from the store), and one
response opened by the operator. Keys are shown by name (the key ring's), never by secret;
a tenant digest without a known name shows as the digest.

Prompt text leaves the proxy here only through `inspect`, which the operator calls for one
response id they chose; the lists (fleet, jobs, keys) carry ids, names, counts and statuses.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from proxy.core.errors import NotFound, response_not_found
from proxy.core.request.paging import PageRequest
from proxy.core.types import EventBatches
from proxy.services.admin.keyring import KeyRing
from proxy.services.fleet.fleet import Fleet
from proxy.services.jobs.background import Background
from proxy.services.metering.limits import Limiter
from proxy.services.responses.stored import StoredResponses
from proxy.store.base import JobQueue, ResponseRecord, Store
from proxy.store.jobsview import JobsView

# Input items the inspector shows at most (the rest: the API's own paging).
INSPECT_ITEMS = 100


def key_names(keys: KeyRing) -> dict[str, str]:
    """Tenant digest -> the name its key goes by (managed keys and the keys file's)."""
    names = {tenant: held.name for tenant, held in keys.tables.limits.items()}
    names.update({key.tenant: key.name for key in keys.managed})
    return names


def fleet_view(fleet: Fleet) -> dict[str, Any]:
    replicas = fleet.status()
    picks = {r.name: r.picks for r in fleet.replicas}
    total = sum(picks.values()) or 1
    for entry, replica in zip(replicas, fleet.replicas, strict=True):
        entry["vllm_version"] = replica.version
        entry.pop("url", None)  # the operator's address stays in logs and the keyed /readyz
        # The affinity spread: this process's share of requests sent to each replica.
        entry["share"] = round(picks[replica.name] / total, 3)
    return {"object": "fleet", "routing": fleet.routing, "replicas": replicas}


async def jobs_of(store: Store, queue: JobQueue, keys: KeyRing,
                  limiter: Limiter | None) -> dict[str, Any]:
    """The queue as the console shows it, read from the store's own client (the web layer
    never reaches the store: tests/unit/test_layers.py)."""
    client = store.client  # type: ignore[attr-defined]  # every store here is a RedisStore
    return await jobs_view(JobsView(client), queue, keys, limiter)


async def jobs_view(view: JobsView, queue: JobQueue, keys: KeyRing,
                    limiter: Limiter | None) -> dict[str, Any]:
    jobs = await view.jobs()
    statuses = await queue.statuses([job.response_id for job in jobs]) if jobs else {}
    names = key_names(keys)
    per_key: Counter[tuple[str, str]] = Counter((job.tenant, job.state) for job in jobs)
    streams = limiter.streams_held() if limiter is not None else {}
    tenants = {tenant for tenant, _state in per_key} | set(streams)
    return {
        "object": "jobs",
        "depth": await queue.length(),
        "jobs": [{"id": job.response_id, "key": names.get(job.tenant, job.tenant),
                  "state": job.state, "status": statuses.get(job.response_id)}
                 for job in jobs],
        "per_key": [{"key": names.get(tenant, tenant),
                     "queued": per_key[(tenant, "queued")],
                     "running": per_key[(tenant, "running")],
                     "streams_here": streams.get(tenant, 0)} for tenant in sorted(tenants)],
    }


async def cancel_job(store: Store, background: Background, response_id: str) -> dict[str, Any]:
    record = await store.get_response_any(response_id)
    if record is None:
        raise response_not_found(response_id)
    return dict(await background.cancel(record.tenant, response_id))


async def inspect(store: Store, stored: StoredResponses, keys: KeyRing,
                  response_id: str) -> dict[str, Any]:
    """One response as the client saw it: the object (status, usage, output), its input
    items, the chain it continues, and whose it is."""
    record = await store.get_response_any(response_id)
    if record is None:
        raise response_not_found(response_id)
    items = await stored.input_items(record.tenant, response_id,
                                     PageRequest(limit=INSPECT_ITEMS, order="asc"))
    return {"object": "response.inspection", "response": record.response,
            "key": key_names(keys).get(record.tenant, record.tenant),
            "chain": [*record.parents, response_id], "input_items": items["data"],
            "input_items_more": items.get("has_more", False),
            "logged": record.logged, "closed": record.closed}


class Console:
    """The console's reads, each bound to what it reads: built once by the composition root, so
    the web layer holds this and never the store or the queue."""

    def __init__(self, fleet: Fleet, store: Store, queue: JobQueue, keys: KeyRing,
                 limiter: Limiter | None, background: Background,
                 stored: StoredResponses) -> None:
        self._fleet, self._store, self._queue, self._keys = fleet, store, queue, keys
        self._limiter, self._background, self._stored = limiter, background, stored

    def fleet(self) -> dict[str, Any]:
        return fleet_view(self._fleet)

    async def jobs(self) -> dict[str, Any]:
        return await jobs_of(self._store, self._queue, self._keys, self._limiter)

    async def cancel(self, response_id: str) -> dict[str, Any]:
        return await cancel_job(self._store, self._background, response_id)

    async def inspect(self, response_id: str) -> dict[str, Any]:
        return await inspect(self._store, self._stored, self._keys, response_id)

    async def record(self, response_id: str) -> ResponseRecord:
        """Any key's response (404 before any byte of its events)."""
        record = await self._store.get_response_any(response_id)
        if record is None:
            raise NotFound(f"Response with id '{response_id}' not found.", param="response_id")
        return record

    def events(self, record: ResponseRecord, after: int) -> EventBatches:
        return self._stored.replay_record(record, after)
