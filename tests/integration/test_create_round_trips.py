"""The create path's Redis round trips before its upstream request is written and before the client
gets `response.created` (a burst's set-up cost): pinned, so that a change adding one to a stream's
first event fails here. The app runs in-process on the session's real redis-server and the
simulator; every command the request's own tasks send is counted (a pipeline or a script call is one
round trip), background loops apart (they carry no request context).

What each path must do before `response.created` (and why it cannot be later):
  - store off, stream or not: nothing (no store state);
  - store on, stream: one, the create script, which also takes the writer's lease and checks
    the key's storage budget: a response the client saw `created` must be retrievable (and
    replayable) at once. A storage pre-check read used to come first (two);
  - background: the create of the queued response with its first events, then the job queued
    (the job must exist before the client learns the id, or a retrieve would find a response
    no worker will ever run); a streamed one then reads the log it follows from its start.
Nothing of the store precedes the upstream request of a foreground create: what the replica
refuses (404, 400, 502) is refused before anything is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from redis.asyncio.connection import AbstractConnection

from proxy.app import create_app
from proxy.core.context.requestctx import CURRENT
from proxy.settings import Settings
from proxy.store.connection.held import HeldConnection
from tests.support.inprocess import post_scope
from tests.support.servers import ServerProcess

HANDSHAKE = frozenset({"HELLO", "PING", "CLIENT", "AUTH", "SELECT"})


class RoundTrips:
    """Counts the round trips sent from inside an HTTP request (its `RequestContext`), and
    notes the count when the upstream request is written and when `response.created` is
    sent."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.request: object | None = None  # the counted request's RequestContext
        self.commands: list[str] = []
        self.at_upstream: int | None = None
        self.at_created: int | None = None
        real = AbstractConnection.send_packed_command

        async def send(conn: AbstractConnection, command: Any, *args: Any, **kwargs: Any
                       ) -> None:
            name = _name(command)
            # A new pooled connection's handshake is the pool's growth, not the request's.
            if self.request is not None and CURRENT.get() is self.request and \
                    name not in HANDSHAKE:
                self.count += 1
                self.commands.append(name)
            await real(conn, command, *args, **kwargs)

        monkeypatch.setattr(AbstractConnection, "send_packed_command", send)
        # The store's creates and final writes go out on the connection its script coalescer
        # holds, a batch per write (store/connection/held.py), from the first caller's context.
        write_batch = HeldConnection.send

        def write(held: HeldConnection, data: bytes, calls: Any) -> None:
            if self.request is not None and CURRENT.get() is self.request:
                self.count += 1  # one round trip, however many calls it carries
                self.commands.append(_name(data))
            write_batch(held, data, calls)

        monkeypatch.setattr(HeldConnection, "send", write)

    def reset(self) -> None:
        self.count, self.commands, self.request = 0, [], None
        self.at_upstream = self.at_created = None

    def upstream_written(self) -> None:
        if self.at_upstream is None and CURRENT.get() is self.request:
            self.at_upstream = self.count


def _name(packed: Any) -> str:
    first = packed[0] if isinstance(packed, list) else packed
    if isinstance(first, memoryview):
        first = bytes(first)
    if isinstance(first, str):
        first = first.encode()
    parts = first.split(b"\r\n")
    return parts[2].decode() if len(parts) > 2 else "?"


@contextlib.asynccontextmanager
async def running(settings: Settings, monkeypatch: pytest.MonkeyPatch
                  ) -> AsyncIterator[tuple[Any, RoundTrips]]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        trips = RoundTrips(monkeypatch)
        upstream = app.state.runtime.fleet.upstream
        post = upstream.post

        async def counted_post(*args: Any, **kwargs: Any) -> Any:
            trips.upstream_written()
            return await post(*args, **kwargs)

        monkeypatch.setattr(upstream, "post", counted_post)
        yield app, trips


async def create(app: Any, trips: RoundTrips, body: dict[str, Any]) -> bytes:
    raw = orjson.dumps(body)
    sent: list[bytes] = []
    fed = False

    async def receive() -> dict[str, Any]:
        nonlocal fed
        trips.request = CURRENT.get()  # set by the access log, around the whole request
        if not fed:
            fed = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.Event().wait()  # after the body: only a disconnect would come
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            if trips.at_created is None and chunk:  # the first event, or the JSON object
                trips.at_created = trips.count
            sent.append(chunk)

    await app(post_scope("/v1/responses", raw), receive, send)
    return b"".join(sent)


@pytest.fixture
def stored(simulator: ServerProcess, redis_server: ServerProcess) -> Settings:
    return Settings.of(upstreams=(simulator.url,),
                       redis_url=f"redis://127.0.0.1:{redis_server.port}/0")


ASK = {"model": "sim-model", "input": "hello [[sim tokens=4]]"}


@pytest.mark.parametrize(("fields", "upstream", "created"), [
    ({"stream": True, "store": False}, 0, 0),
    ({"stream": False, "store": False}, 0, 0),
    # the create (its budget check and lease inside); the storage pre-check is skipped for a
    # key this process just saw well inside its budget (store/budget/headroom.py)
    ({"stream": True, "store": True}, 0, 1),
    # a JSON answer is the final object: the create, then the final write
    ({"stream": False, "store": True}, 0, 2),
    # the create with its first events, the job queued; a stream then reads the log it follows
    ({"stream": True, "background": True}, None, 3),
    ({"stream": False, "background": True}, None, 2),
])
async def test_round_trips_before_the_upstream_and_the_first_event(
        stored: Settings, monkeypatch: pytest.MonkeyPatch, fields: dict[str, Any],
        upstream: int | None, created: int) -> None:
    async with running(stored, monkeypatch) as (app, trips):
        # Warm: the pool's connections made, the scripts loaded (per process, not per request).
        await create(app, trips, {**ASK, **fields})
        trips.reset()
        body = await create(app, trips, {**ASK, **fields})
        assert b"error" not in body[:200], body[:300]
        assert (trips.at_upstream, trips.at_created) == (upstream, created), trips.commands
