"""A read-only view of the background job queue for the console (store/jobqueue.py's layout):
the queued jobs (one HGETALL of the waiting hash, bounded by `--max-queued-jobs-total`) and the
running ones (XRANGE of the stream, bounded by `limit`). Never on a request's path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from proxy.store import keys
from proxy.store.connection.failures import store_errors

ZERO = b"\0"


@dataclass(frozen=True)
class JobRef:
    response_id: str
    tenant: str
    state: str  # queued | running


class JobsView:
    def __init__(self, client: Redis) -> None:
        self._client = client

    async def jobs(self, limit: int = 500) -> list[JobRef]:
        with store_errors():
            waiting: Any = await self._client.hgetall(keys.JOB_WAITING)
            running: Any = await self._client.xrange(keys.JOB_QUEUE, count=limit)
        out = [JobRef(fields.get(b"r", b"").decode(), fields.get(b"k", b"").decode(), "running")
               for _entry, fields in running if fields]
        queued = sorted(((field.decode().partition(" "), value) for field, value in
                         waiting.items()), key=lambda kv: (kv[0][0], int(kv[0][2] or 0)))
        for (tenant, _sep, _n), value in queued[:limit]:
            out.append(JobRef(value.split(ZERO, 1)[0].decode(), tenant, "queued"))
        return out
