"""What the web layer reads: `WebState`, exactly the services, process parts and settings
groups that routes, sockets and error handlers use. The composition root builds it
(proxy/runtime.py `Runtime.web_state`) and sets it once on the app (`attach`, app.py's
lifespan); handlers read it through `state_of` (Starlette's `HTTPConnection` is the base of both
`Request` and `WebSocket`). A route is served in a test with a `WebState` of fakes
(tests/unit/test_built_alone_web.py), no store or fleet behind it.

A leaf on purpose: web/errors.py renders what every other web module raises, so the helper it
uses must not import them back (web/incoming.py imports web/middleware/auth.py, which imports
errors). The types below are for the checker only: nothing is imported when the app runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from starlette.applications import Starlette
from starlette.requests import HTTPConnection

from proxy.web.ticks import Ticks  # a leaf too: it imports nothing of the web layer

if TYPE_CHECKING:
    from proxy.core.policy.keyslots import KeySlots
    from proxy.services.admin.console import Console
    from proxy.services.admin.keyring import KeyRing
    from proxy.services.admin.usage import Usage
    from proxy.services.cache.chat import CachedChat
    from proxy.services.files.files import Files
    from proxy.services.fleet.fleet import Fleet
    from proxy.services.fleet.passthrough import Passthrough
    from proxy.services.jobs.background import Background
    from proxy.services.metering.limits import Limiter
    from proxy.services.process.drain import Drain
    from proxy.services.process.loops import LoopSupervisor
    from proxy.services.responses.conversations import Conversations
    from proxy.services.responses.create import ResponsesService
    from proxy.services.responses.prompts import Prompts
    from proxy.services.responses.stored import StoredResponses
    from proxy.services.vectors.stores import VectorStores
    from proxy.settings import LimitSettings, StreamSettings, TenancySettings
    from proxy.telemetry.metrics import Metrics


class Reachable(Protocol):
    """All `/readyz` asks of the store: that it answers (raises `StoreUnavailable` if not)."""

    async def ping(self) -> None: ...


@dataclass(frozen=True)
class WebState:
    # The services the routes hand requests to.
    responses: ResponsesService
    stored: StoredResponses  # retrieve, delete, replay, input items
    background: Background  # cancel
    conversations: Conversations
    passthrough: Passthrough  # chat completions, models
    chat: CachedChat | None  # chat completions through the cache (None: the cache is off)
    files: Files
    prompts: Prompts
    vector_stores: VectorStores
    console: Console  # the operator's reads (`/admin/fleet`, jobs, a response)
    usage: Usage  # a key's usage (`/v1/usage`, the admin key list)
    # What `/readyz` and `/metrics` report.
    fleet: Fleet
    store: Reachable
    draining: Drain
    supervisor: LoopSupervisor
    metrics: Metrics
    # Per key: who is accepted (admin included), their limits, their sockets here.
    keys: KeyRing
    limiter: Limiter | None  # None: no key has a limit
    sockets: KeySlots
    # The settings groups the web layer enforces itself.
    streams: StreamSettings  # pings, send timeout, socket age
    limits: LimitSettings  # a WebSocket frame's size
    tenancy: TenancySettings  # origins of file URLs, who may see `/readyz`'s detail
    # The streams' pings and send watchdogs, on one timer of the loop (web/ticks.py).
    ticks: Ticks = field(default_factory=Ticks)


def attach(app: Starlette, state: WebState) -> None:
    app.state.web = state  # Starlette's State keeps it in its dict of values
    # and as the State object's own attribute: Starlette's State finds a value through
    # `__getattr__`, which Python calls only once the normal lookup has failed, that is after
    # making an AttributeError and its message (~3.4k instructions, twice a request: `state_of`
    # and a stream's send timeout, web/eventstream.py). The normal lookup finds this one.
    object.__setattr__(app.state, "web", state)


def state_of(conn: HTTPConnection) -> WebState:
    state: WebState = conn.app.state.web
    return state
