"""`EventStream`: a `text/event-stream` response as pure ASGI, built for the per-token hot path.

What it does, and what it leaves out on purpose:
- each item of the body iterator becomes one `http.response.body` message, written as it comes
  (no buffering): finished bytes as they are (a chat stream passed through), or, with an
  `encode` (web/rendering.py: a Responses stream's event batches and core/events/sse.py `frames`),
  the bytes it makes of the item: the one place Responses events become SSE;
- a client that goes away is noticed at once by a task awaiting `http.disconnect`, which cancels
  the streaming task: the body iterator's cleanup closes the upstream (vLLM stops generating)
  even while no chunk is flowing. That task is the request's one watcher (web/disconnect.py
  `Departure`): a streamed create hands over the one that watched its set-up;
- a comment line (`: ping`) goes out when the stream was silent for a whole ping interval, so
  proxies and load balancers do not cut an idle stream (a timed check on the app's one loop
  timer, web/ticks.py; a task is made only for a ping that is due);
- the body is streamed by a task of its own, started here: every chunk then wakes a coroutine
  stack two frames deep instead of the whole ASGI stack (uvicorn, every middleware, the
  router), which would otherwise be resumed frame by frame for each token;
- a client that stops reading but keeps its socket open makes `send` block (uvicorn waits for
  its transport to drain): a watchdog (a timer callback, `_Timers`), every quarter of
  `send_timeout`, abandons the stream once a write has been pending that long with no write
  completing, exactly as if the client had gone (the body's cleanup aborts the upstream
  request, its pool slot is freed). The connection is then left to uvicorn, which closes it
  once what it buffered is flushed;
- once the first body bytes are out, chunks go to the send beneath the middlewares
  (`BODY_SEND`, put in the scope by the access log): past that point every wrapper (access
  log, metrics, Starlette's two exception layers) only hands the message on, ~4 frames and
  ~1 µs per token on the hot path. The response start and the first body message still go
  through them all (status, headers, the time to first byte);
- a Responses stream's terminal batch goes out with the body's end (`more_body: False`): one
  write for both instead of two (uvicorn writes the chunk and the chunked terminator together),
  a write system call less per stream; the body iterator still runs to its end after it;
- per chunk it costs one `send` and two counter increments: no lock, no cancel scope, no timer.
  (sse-starlette, which this replaces, opens an anyio cancel scope and takes a lock for every
  send: about a tenth of the proxy's CPU at 256 streams.) No lock is needed because uvicorn's
  `send` writes a whole message to the transport before it can yield, so a ping can never land
  inside a frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from starlette.types import Receive, Scope, Send

from proxy.core.errors import StoreUnavailable, failure_cause
from proxy.core.events.sse import PING
from proxy.web.disconnect import Departure, adopted
from proxy.web.middleware.access import BODY_SEND
from proxy.web.ticks import Tick, Ticks

log = logging.getLogger("proxy.web")

# Seconds a write may block on a client that stopped reading, for streams served outside an app
# that configures it (`Settings.send_timeout` is the same figure).
DEFAULT_SEND_TIMEOUT = 30.0

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),  # nginx: do not buffer the stream
]


class EventStream:
    def __init__(self, body: AsyncIterator[Any], *, ping: float = 15.0, status: int = 200,
                 headers: Mapping[str, str] | None = None,
                 send_timeout: float | None = None,
                 encode: Callable[[Any], bytes] | None = None,
                 last: Callable[[Any], bool] | None = None,
                 ticks: Ticks | None = None) -> None:
        # `encode`: what makes an item of `body` bytes; None: the items are bytes already.
        # `last`: tells the item that ends the stream (a Responses stream's terminal event),
        # sent with the body's end in one write; None: the end is known when `body` ends.
        self.body = body
        self.encode = encode
        self.last = last
        self.ping = ping
        # None: the configured `--send-timeout` of the app serving the request (so every
        # route's stream is bounded without each handler passing it); 0: unbounded.
        self.send_timeout = send_timeout
        # Where the pinger's and the watchdog's checks wait (web/ticks.py): the app's, shared
        # by its streams; None: one of the stream's own.
        self.ticks = ticks
        self.status = status
        extra = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                 for k, v in (headers or {}).items()
                 if k.lower() not in ("content-type", "content-length", "cache-control")]
        self.raw_headers = _HEADERS + extra
        self._sent = 0  # frames begun: the pinger only speaks when this stands still
        self._done = 0  # frames whose `send` returned
        self.stalled = False  # abandoned because the client stopped reading
        self._ended = False  # the body's end is sent: the client leaving now cancels nothing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status,
                    "headers": self.raw_headers})
        # The request's one disconnect watcher: the create's, when it set the stream up, and
        # its loop: no lookup of the running loop here (Python 3.11's is a `getpid` system
        # call; `create_task` and the timers made two).
        kept = adopted(scope)
        loop = kept.loop if kept is not None else asyncio.get_running_loop()
        streamer = loop.create_task(self._stream(send, scope.get(BODY_SEND) or send),
                                    name="sse-stream")
        departure = kept if kept is not None else Departure(receive, loop)
        departure.aim(lambda: self._client_gone(streamer))
        send_timeout = _send_timeout(scope) if self.send_timeout is None else self.send_timeout
        ticks = Ticks() if self.ticks is None else self.ticks
        timers = _Timers(self, streamer, send, send_timeout, loop, ticks)
        try:
            await asyncio.shield(streamer)
        except asyncio.CancelledError:
            # Either the streamer was cancelled (the client went away: done, nothing to do),
            # or we are (shutdown): then stop the streamer and let the cancellation go on.
            current = asyncio.current_task(loop)
            if current is not None and current.cancelling():
                raise
        finally:
            if not streamer.done():
                streamer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait([streamer], timeout=5.0)
            departure.stop()
            timers.cancel()
            await _close(self.body)

    async def _stream(self, send: Send, body_send: Send) -> None:
        encode, last = self.encode, self.last
        try:
            async for item in self.body:
                if self._ended:
                    # After the item that ends the stream nothing is sent: the iterator is
                    # only run to its end (what it does once its last item is out).
                    continue
                data = item if encode is None else encode(item)
                more = last is None or not last(item)
                self._sent += 1
                self._ended = not more
                await send({"type": "http.response.body", "body": data, "more_body": more})
                self._done += 1
                if data:
                    send = body_send  # the first bytes went through every wrapper: enough
        except StoreUnavailable as exc:
            # A replay that lost the store part-way (its reads only: a live turn ends with a
            # terminal event of its own). Cut the stream: a clean end would tell the client
            # the stream was whole; a broken transfer tells it to read again.
            log.warning("store unavailable on a replay, stream cut: %s", failure_cause(exc))
            return
        except Exception:
            # Headers are out: an error can no longer be an HTTP status. The iterators we
            # stream end with a terminal event of their own; this is a bug, so say so loudly,
            # and cut the stream (see above).
            log.exception("stream body failed")
            return
        if self._ended:
            return
        self._sent += 1
        self._ended = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        self._done += 1

    def _client_gone(self, streamer: asyncio.Task[None]) -> None:
        # Once the end is sent the server reports the exchange over as a disconnect; the
        # streamer is then only finishing its iterator, which must run to its end.
        if not self._ended:
            streamer.cancel()

class _Timers:
    """A stream's pinger and send watchdog, as callbacks of one timed check rather than a
    task each: two tasks fewer per stream, made before its first bytes (a burst makes 256 of
    them at once), for checks that run every few seconds; and one check pending for both
    rather than one each. The check waits in `Ticks` (web/ticks.py: the app's streams' checks
    on one loop timer; a timer of the loop per stream cost ~2 µs of its set-up). Only a
    ping's `send` needs a task, made when one is due (a silent stream), and one at a time.

    Pinger: every `ping` seconds, a `: ping` comment when no frame began since the last check.
    Watchdog: every quarter of `send_timeout`, the stream is abandoned (`stalled`, the streamer
    cancelled: as if the client had gone) once a write has been pending that long with no write
    (frame or ping) completing meanwhile; the stall is declared between `send_timeout` and
    `send_timeout` + two steps after it began. Polling keeps the per-chunk path free of timers.
    Each check comes due `ping` (or a step) after the previous one ran, as with a timer of its
    own; the one timer is set for whichever is due first, and runs every check that is due."""

    def __init__(self, stream: EventStream, streamer: asyncio.Task[None], send: Send,
                 send_timeout: float, loop: asyncio.AbstractEventLoop, ticks: Ticks) -> None:
        self._stream = stream
        self._streamer = streamer
        self._send = send
        self._loop = loop
        self._ticks = ticks
        self._handle: Tick | None = None
        self._ping_task: asyncio.Task[None] | None = None
        self._pings = 0  # pings whose `send` returned
        self._seen = -1  # frames begun at the pinger's last check
        self._step = send_timeout / 4
        self._progress = -1  # writes completed at the watchdog's last move
        self._since = now = loop.time()
        # When each check is next due (None: that check is off).
        self._ping_next = now + stream.ping if stream.ping > 0 else None
        self._watch_next = now + self._step if send_timeout > 0 else None
        self._arm()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._ping_task is not None:
            self._ping_task.cancel()

    def _arm(self) -> None:
        ping_next, watch_next = self._ping_next, self._watch_next
        due = (watch_next if ping_next is None else ping_next if watch_next is None
               else min(ping_next, watch_next))
        self._handle = None if due is None else self._ticks.at(due, self._due, self._loop)

    def _due(self, when: float) -> None:
        """The check set for `when`: the checks due by then run (the loop may run a timer a
        clock tick early, so `now` would not tell)."""
        now = self._loop.time()
        if self._ping_next is not None and self._ping_next <= when:
            self._ping_due()
            self._ping_next = now + self._stream.ping
        if self._watch_next is not None and self._watch_next <= when:
            if not self._watch_due(now):
                return  # the stream is abandoned: no check is left to run
            self._watch_next = now + self._step
        self._arm()

    def _ping_due(self) -> None:
        stream = self._stream
        if stream._sent == self._seen and not self._pinging:
            self._ping_task = self._loop.create_task(self._ping(), name="sse-ping")
        self._seen = stream._sent

    @property
    def _pinging(self) -> bool:
        """A ping's `send` is pending."""
        return self._ping_task is not None and not self._ping_task.done()

    async def _ping(self) -> None:
        try:
            await self._send({"type": "http.response.body", "body": PING, "more_body": True})
        except Exception:  # a write that fails: nobody reads this stream
            self._streamer.cancel()
            return
        self._pings += 1

    def _watch_due(self, now: float) -> bool:
        """Whether the stream goes on (False: abandoned, a client that stopped reading)."""
        stream = self._stream
        moved = stream._done + self._pings
        if moved != self._progress or not (stream._sent != stream._done or self._pinging):
            self._progress, self._since = moved, now
        elif now - self._since >= self._step * 5:  # the timeout and one step past it
            stream.stalled = True
            log.warning("client stopped reading for %g s: stream abandoned", self._step * 4)
            self._streamer.cancel()
            return False
        return True


def _send_timeout(scope: Scope) -> float:
    """The serving app's `--send-timeout` (the default when served outside the proxy app)."""
    state = getattr(scope.get("app"), "state", None)
    streams = getattr(getattr(state, "web", None), "streams", None)  # web/state.py's WebState
    return float(getattr(streams, "send_timeout", DEFAULT_SEND_TIMEOUT))


async def _close(body: AsyncIterator[Any]) -> None:
    aclose = getattr(body, "aclose", None)
    if aclose is not None:
        try:  # noqa: SIM105 - `contextlib.suppress` is three calls more a stream
            await aclose()
        except Exception:  # the stream is over: its iterator's end is its own affair
            pass
