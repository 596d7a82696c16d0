"""Everything one process runs with, built once in the app's lifespan and passed down.

No globals: a test builds its own `Runtime` with another store or upstream.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from proxy.metrics import Metrics
from proxy.services.fleet import Fleet
from proxy.services.passthrough import Passthrough
from proxy.services.responses import ResponsesService
from proxy.settings import Settings
from proxy.upstream import Upstream


@dataclass
class Runtime:
    settings: Settings
    metrics: Metrics
    http: httpx.AsyncClient
    upstream: Upstream
    fleet: Fleet
    passthrough: Passthrough
    responses: ResponsesService

    @classmethod
    def build(cls, settings: Settings, *, http: httpx.AsyncClient | None = None) -> Runtime:
        client = http or Upstream.make_client(settings.timeouts)
        upstream = Upstream(client, api_key=settings.upstream_api_key, timeouts=settings.timeouts)
        fleet = Fleet(upstream, settings.upstreams, interval=settings.discovery_interval,
                      probe_timeout=min(5.0, settings.timeouts.connect + 2.0))
        metrics = Metrics()
        return cls(
            settings=settings,
            metrics=metrics,
            http=client,
            upstream=upstream,
            fleet=fleet,
            passthrough=Passthrough(fleet),
            responses=ResponsesService(fleet, metrics),
        )

    async def aclose(self) -> None:
        await self.http.aclose()
