"""Everything one process runs with, built once in the app's lifespan and passed down.

No globals: a test builds its own `Runtime` with another store or upstream. `aclose()` ends
things in the reverse order of their dependencies: first the tasks that finish streams (they
still write to the store), then the log writer and readers, then the store and the HTTP client.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from proxy.metrics import Metrics
from proxy.services.conversations import Conversations
from proxy.services.eventlog import EventLogHub
from proxy.services.fleet import Fleet
from proxy.services.follow import Followers
from proxy.services.passthrough import Passthrough
from proxy.services.responses import ResponsesService
from proxy.services.stored import StoredResponses
from proxy.services.tasks import TaskSet
from proxy.settings import Settings
from proxy.store.base import Store
from proxy.store.factory import open_store
from proxy.upstream import Upstream

# Seconds that in-flight finishing work (final writes, upstream closes) gets at shutdown.
DRAIN_SECONDS = 5.0


@dataclass
class Runtime:
    settings: Settings
    metrics: Metrics
    http: httpx.AsyncClient
    upstream: Upstream
    fleet: Fleet
    store: Store
    tasks: TaskSet
    hub: EventLogHub
    followers: Followers
    passthrough: Passthrough
    responses: ResponsesService
    stored: StoredResponses
    conversations: Conversations

    @classmethod
    def build(cls, settings: Settings, *, http: httpx.AsyncClient | None = None,
              store: Store | None = None) -> Runtime:
        client = http or Upstream.make_client(settings.timeouts)
        upstream = Upstream(client, api_key=settings.upstream_api_key, timeouts=settings.timeouts)
        fleet = Fleet(upstream, settings.upstreams, interval=settings.discovery_interval,
                      probe_timeout=min(5.0, settings.timeouts.connect + 2.0))
        metrics = Metrics()
        store = store or open_store(settings.redis_url)
        tasks = TaskSet()
        hub = EventLogHub(store, ttl=settings.response_ttl, event_ttl=settings.event_ttl)
        followers = Followers(store)
        return cls(
            settings=settings,
            metrics=metrics,
            http=client,
            upstream=upstream,
            fleet=fleet,
            store=store,
            tasks=tasks,
            hub=hub,
            followers=followers,
            passthrough=Passthrough(fleet),
            responses=ResponsesService(fleet, store, hub, tasks, metrics, settings),
            stored=StoredResponses(store, followers, settings),
            conversations=Conversations(store, settings),
        )

    async def aclose(self) -> None:
        await self.tasks.drain(DRAIN_SECONDS)
        await self.hub.aclose()
        await self.followers.aclose()
        await self.store.aclose()
        await self.http.aclose()
