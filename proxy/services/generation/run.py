"""One generation: the upstream's chat stream through the assembler to whoever listens.

    upstream bytes ─▶ ChatStreamReader (decode + assemble) ─▶ events
        ─▶ encoded once (orjson) ─▶ Recorder (event log, batched; final write) ─▶ the caller

The same `Generation` serves a foreground stream (its batches go to the client's transport as they
are: SSE frames them, the WebSocket sends each JSON), a foreground JSON request (the caller
only wants the final object) and a background job (the log is the only listener). Invariants:
- exactly one terminal event, always: the upstream's end, a cut or stalled upstream
  (`response.failed`), or our caller going away (`response.cancelled`);
- a stored turn's terminal event and final object are written (`Recorder.finish`) *before* the
  terminal event is handed to the caller, so a client that has seen it can GET the object from
  any instance;
- the upstream response is closed on every way out, under a shield: a cancelled client must
  still make vLLM stop generating.

A steer (the WebSocket `response.steer`, services/responses/steering.py) asks a running turn to
end at its next safe boundary (boundary.py): at once while text or reasoning streams (the read
waiting on the upstream is failed by closing it, which also makes vLLM free the sequence),
after a call's item completes, or between a tool loop's turns. The response then ends with the
assembler's `steered()` ending, recorded and handed over like any terminal event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import orjson

from proxy.core.errors import ProxyError, UpstreamTimeout, failure_cause
from proxy.core.events.assembler import Assembler, Phase
from proxy.core.events.chatstream import ChatStreamReader
from proxy.core.events.encoding import encode_events
from proxy.core.types import TERMINAL_EVENTS, Event, EventBatch
from proxy.services.eventlog.recorder import Recorder
from proxy.services.fleet.fleet import Call
from proxy.services.generation.boundary import at_boundary
from proxy.services.process.loops import TaskSet
from proxy.store.base import StoredEvent
from proxy.telemetry.metrics import Metrics
from proxy.telemetry.tracing import note_answer, note_first_chunk
from proxy.upstream.client import map_transport_errors

if TYPE_CHECKING:
    from proxy.services.generation.toolloop import ToolLoop

log = logging.getLogger("proxy.turn")

_DONE, _TOOL = Phase.DONE, Phase.TOOL  # bound once: read per upstream read

# Most bytes, and seconds, spent after the upstream's `[DONE]` waiting for its body's end.
_MAX_TAIL = 4096
_TAIL_SECONDS = 2.0


class Generation:
    def __init__(self, call: Call | None, assembler: Assembler, tasks: TaskSet, *,
                 recorder: Recorder | None = None, encode: bool = True,
                 started: bool = False, metrics: Metrics | None = None,
                 loop: ToolLoop | None = None) -> None:
        # `call` is None when a tool loop opens the upstream turns itself (MCP tools).
        self.call = call
        self._loop = loop
        self._metrics = metrics
        self.assembler = assembler
        self.recorder = recorder
        self._tasks = tasks
        self._encode = encode or recorder is not None
        self._started = started  # the start events were already made (a background job)
        self._stop_reason: str | None = None
        self._abandoned = False  # our caller went away: the upstream is aborted, not drained
        # A steer asked this turn to end at its next safe boundary; `_steered`: it ends there
        # now (its upstream closed on purpose). `_reading`: the upstream call `_read` reads.
        self._steering = False
        self._steered = False
        self._reading: Call | None = None

    def stop(self, reason: str) -> None:
        """Make the coming abandonment a failure (`reason`) rather than a cancellation: the
        caller is about to cancel us for a reason of its own, e.g. a worker shutting down."""
        self._stop_reason = reason

    def interrupt(self, reason: str) -> None:
        """End this turn now with `response.failed` (`reason`), sent to its own caller like any
        terminal event (the drain's grace is over, or this process lost the response's lease).
        Closing the upstream makes the pending read fail, which `_events` turns into the
        failure: nothing is added to the per-chunk path."""
        if self.assembler.done or self._stop_reason is not None:
            return
        self._stop_reason = reason
        if self.call is not None:
            self._tasks.spawn(self.call.aclose(), name="turn-interrupt")

    async def steer(self) -> bool:
        """End this turn at its next safe boundary (boundary.py) for a steer: at once when it
        stands at one, else where it reaches one. False when it has ended, or is ending for
        another reason (the steer then cannot change it)."""
        if self.assembler.done or self._stop_reason is not None:
            return False
        self._steering = True
        if self._loop is not None:
            self._loop.halt = True  # no further upstream turn: the loop stops between turns
        reading = self._reading
        if reading is not None and self._boundary():
            await reading.aclose()  # the waiting read fails at once: `_read` ends the response
        return True

    def _closed_for_steer(self) -> bool:
        return self._steered

    def _boundary(self) -> bool:
        """Whether a steered turn ends here (then it is `_steered`)."""
        if self._steering and not self._steered and at_boundary(self.assembler):
            self._steered = True
        return self._steered

    async def run(self) -> AsyncGenerator[EventBatch, None]:
        """Batches of encoded events, the terminal one last. Closing the iterator early (the
        caller went away) cancels the response and still records its end."""
        # Closed by hand rather than by `contextlib.aclosing` (an object and two coroutines a
        # turn), in its order: the turn's end first, then the reading generator.
        batches: AsyncGenerator[list[Event], None] | None = None
        recorder = self.recorder
        # The log's own `record`, not `Recorder.add` (a call a token fewer), looked up once:
        # a turn's log is opened before it runs (services/responses/create.py).
        handle = recorder.log_handle if recorder is not None else None
        record = handle.record if handle is not None else None
        try:
            try:
                batches = self._events()  # (the start events made: inside, as they were)
                async for events in batches:
                    encoded = self._encoded(events)
                    if recorder is not None and events:  # (the log checks its numbers by
                        # the last batch it was given: never an empty one)
                        # The batch that ends with the terminal event (not merely one made
                        # after it: the start events of a wholly buffered answer, see _read).
                        # The phase first, read as an attribute (`done` is a property): one
                        # check a token, the type only at the end.
                        if self.assembler.phase is _DONE and \
                                events[-1]["type"] in TERMINAL_EVENTS:
                            await self._finish(events, encoded)
                        elif record is not None:
                            record(events, encoded)
                    yield encoded
            finally:
                if not self.assembler.done:
                    await self._tasks.shielded(self._abandon(), name="turn-abandon")
                self._count()
        finally:
            if batches is not None:
                await batches.aclose()

    def _encoded(self, events: list[Event]) -> EventBatch:
        return encode_events(events) if self._encode else []

    async def _finish(self, events: list[Event], encoded: EventBatch) -> None:
        """Record a batch that ends with the terminal event: the events before it go to the
        log, the terminal one is written together with the final object."""
        recorder = self.recorder
        assert recorder is not None
        kind, data = encoded[-1]
        # `tuple.__new__` straight, as the log makes its events: the named tuple's own
        # `__new__` is a Python call.
        terminal = tuple.__new__(StoredEvent, (events[-1]["sequence_number"], kind, data))
        try:
            # The events before the terminal one go with it (not added first: that woke the
            # log's flusher for events the final write then carried).
            await self._tasks.shielded(recorder.finish(self.assembler.snapshot(), terminal,
                                                       events[:-1], encoded[:-1]),
                                       name="turn-finish")
        except ProxyError as exc:
            # The client still gets its terminal event: the answer is real even if we could not
            # keep it. The stored copy stays as it was (it expires).
            log.error("could not store the end of %s: %s", self.assembler.snapshot()["id"],
                      failure_cause(exc))

    async def _abandon(self) -> None:
        """Our caller went away before the end: stop the upstream, close the log."""
        self._abandoned = True
        if self.call is not None:
            await self.call.aclose()
        if self._loop is not None:
            await self._loop.aclose()
        reason = self._stop_reason
        events = self.assembler.fail(reason) if reason else self.assembler.cancel()
        if self.recorder is not None and events:
            encoded = [(e["type"], orjson.dumps(e)) for e in events]
            try:
                await self._finish(events, encoded)
            except ProxyError as exc:
                log.error("could not store the cancellation: %s", failure_cause(exc))

    def _count(self) -> None:
        """Per turn, never per token: the hot path stays free of bookkeeping."""
        metrics = self._metrics
        if metrics is None:
            return
        assembler = self.assembler
        usage = assembler.usage or {}
        metrics.response_finished(assembler.status, usage.get("input_tokens", 0),
                                  usage.get("output_tokens", 0))

    def _events(self) -> AsyncGenerator[list[Event], None]:
        """The assembler's events in batches: the start events at once (before the upstream's
        first byte), then one batch per upstream read. A turn of one upstream call (no tool
        loop) is its read itself: a generator less for each batch to pass through (~0.4 µs
        a batch, one a token at a streaming pace)."""
        assembler = self.assembler
        opening = assembler.resume() if self._started else assembler.start()
        call = self.call
        if self._loop is not None or call is None:
            return self._turns(opening)
        if call.response.buffered:
            # The upstream's first bytes are already here (a loaded process: they arrived while
            # this stream waited for the core), so its first read returns at once: the start
            # events go out with that read's events, one write instead of two. An idle process
            # sends them alone, before the upstream's first byte, as always.
            return self._read(call, lead=opening)
        return self._read(call, first=opening)

    async def _turns(self, opening: list[Event]) -> AsyncGenerator[list[Event], None]:
        """The batches of a turn a tool loop runs (MCP and hosted tools): the upstream turns
        it opens, and its own steps between them."""
        assembler = self.assembler
        loop = self._loop
        yield opening
        if loop is not None:  # MCP: list, run approved calls, open the first upstream turn
            async for events in loop.start(assembler):
                yield events
            self.call = loop.call
        while self.call is not None and not assembler.done:
            async for events in self._read(self.call):
                yield events
            if loop is None or assembler.waiting is None or assembler.done:
                return
            # The model called an MCP tool: run it, then the next upstream turn.
            async for events in loop.resume(assembler):
                yield events
            self.call = loop.call
            if self._stop_reason is not None and not assembler.done:
                # interrupted while no upstream call was open (during an MCP call): end here
                await loop.aclose()
                yield assembler.fail(self._stop_reason)
                return
        if self._steering and not assembler.done:
            # The tool loop stopped between its turns for a steer (it opened no next turn).
            yield assembler.steered()

    async def _read(self, call: Call, *, lead: list[Event] | None = None,
                    first: list[Event] | None = None) -> AsyncGenerator[list[Event], None]:
        """One upstream turn through the assembler; ends at the terminal event, or where an
        MCP call waits for the tool loop (the rest of that upstream turn is not read). `lead`:
        events not sent yet (the start ones), given only when the first read cannot wait: put
        before that read's events, or yielded alone first when that read makes none or ends
        the turn (a terminal batch waits for the final write; the start events never do).
        `first`: events sent before anything is read (the start ones, the upstream silent)."""
        if first:
            yield first
        assembler = self.assembler
        reader = ChatStreamReader(assembler)
        span = call.span  # None unless tracing is on: then one check per read, nothing more
        self._reading = call
        raws: AsyncGenerator[bytes, None] | None = None
        try:
            if self._boundary():  # steered while this turn was being opened: read nothing
                await call.aclose()
            try:
                # A read failed by a steer's close is expected: not logged as an upstream fault.
                with map_transport_errors(call.replica.url, quiet=self._closed_for_steer):
                    raws = reading = call.response.aiter_raw()
                    async for raw in reading:
                        if span is not None:  # the first chunk: its time, once
                            note_first_chunk(span)
                            span = None
                        events = reader.feed(raw)
                        if lead is not None:
                            for batch in self._led(lead, events):
                                yield batch
                            lead = None
                        elif events:
                            yield events
                        # Over: the terminal event; an MCP call waits (unless the turn
                        # finished: then its usage is read); a steer waited for this boundary
                        # (a call's item ended).
                        phase = assembler.phase
                        if phase is _DONE or (phase is _TOOL and not assembler.turn_finished) \
                                or (self._steering and self._boundary()):
                            break
                ending = self._ending(reader)
            except UpstreamTimeout:
                ending = assembler.fail(
                    "upstream stalled: no data within the first-token or idle timeout")
            except ProxyError as exc:
                # An interrupted or steered turn's upstream was closed on purpose: say why,
                # not "lost".
                ending = (assembler.steered() if self._steered else assembler.fail(
                    self._stop_reason or f"upstream connection lost: {exc.message}"))
            for batch in self._led(lead, ending):
                yield batch
        finally:
            self._reading = None
            await self._release(call, raws)

    async def _release(self, call: Call, raws: AsyncGenerator[bytes, None] | None) -> None:
        """A read is over: its upstream call finished in the background or closed now."""
        if raws is not None:
            # Left at its `yield` by a `break`: closed here (no wait, it only exits), not by
            # the loop's finalizer, which would make a task of it (~10 µs a turn).
            await raws.aclose()
        assembler = self.assembler
        if call.span is not None:
            note_answer(call.span, assembler.usage, assembler.snapshot().get("id"))
        if assembler.done and not self._abandoned and self._stop_reason is None \
                and not self._steered:
            # The answer is whole; only the body's end may be left. Usually it came in the
            # same read: then closing gives the connection back at once, and waits for
            # nothing (a task for it cost ~10 µs a turn). Else reading it lets the connection
            # go back to the pool, but our client need not wait for it: a task finishes the
            # upstream side.
            if call.response.complete:
                await call.aclose()
            else:
                self._tasks.spawn(_finish_upstream(call, _TAIL_SECONDS), name="upstream-tail")
        else:  # cut short (interrupted or steered: its upstream is closed, nothing to read)
            await self._tasks.shielded(call.aclose(), name="upstream-close")

    def _ending(self, reader: ChatStreamReader) -> list[Event]:
        """The events that end a read which stopped without an error: a steer's ending, the
        upstream's end, or none (an MCP call waits for the tool loop)."""
        assembler = self.assembler
        if self._steered:
            return assembler.steered()
        return reader.end() if not assembler.done and assembler.phase is not Phase.TOOL else []

    def _led(self, lead: list[Event] | None, events: list[Event]) -> list[list[Event]]:
        """The batches for one read's `events` while `lead` (the start events) is unsent: one
        batch of both, or the start events alone first when the read ended a stored turn (its
        batch waits for the final write, the start events must not). A turn not stored sends
        a whole answer read at once in one batch: one write for the response (a short answer
        on a loaded process), not two (~20 µs: the second write's system call and its send)."""
        if lead is None:
            return [events] if events else []
        if self.assembler.done and self.recorder is not None:
            return [lead, events] if events else [lead]
        return [[*lead, *events]]


async def _finish_upstream(call: Call, timeout: float) -> None:
    """Read what is left of an answered upstream body (a few bytes, bounded in size and time),
    then close: a finished body returns its connection to the pool, anything else aborts it."""
    tail = 0
    try:
        async with asyncio.timeout(timeout):
            async for raw in call.response.aiter_raw():
                tail += len(raw)
                if tail > _MAX_TAIL:
                    break
    except (ProxyError, TimeoutError, OSError):
        pass  # a late or broken tail only costs the connection
    finally:
        await call.aclose()
