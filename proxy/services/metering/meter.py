"""What one request spent, from its admission to its settlement: the one metering path that
every entry point takes (HTTP creates and chat, compaction, the WebSocket, background jobs,
cache hits), so a new way in cannot forget half of it.

    web/limiting.py `metering(conn)` ── Limiter.admit ──▶ a Meter (or one with nothing to count)
      the service tells it what the request spends, as it runs:
        meter.track(source)    the live count of its own generation (an assembler, a relay)
        meter.charge(tokens)   a cost on the side (a compaction's summarisation turn)
      and the request ends one of three ways, each settling the ticket exactly once:
        - an answer in one piece: the helper's `finally` settles, also when the work failed,
          was cancelled or its client left mid-generation (what was generated until then);
        - a stream: `meter.stream(body)` settles when the stream is closed, ended or left,
          or (`last`) before its client is handed the item that ends it;
        - a background job: `meter.hand_over()`; its worker adopts the ticket into a Meter of
          its own (services/jobs/runner.py) and settles it when the job ends, finished or cancelled.

What a request spent: the usage vLLM reported when it did; otherwise what it streamed until it
was cut: one token per output delta (vLLM sends one chunk per token) plus the prompt estimated
from its bytes (`BYTES_PER_TOKEN`), and nothing when no delta came (the request never reached
a client). Cost on the per-chunk path: one integer increment in the assembler, whose count the
service hands the meter (`track`), so a Responses stream's event batches go by untouched; a
chat stream passed through counts its `data:` frames (one `bytes.count` per read), and only its
last frames are read for a usage when it settles.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, TypeVar, overload

import orjson

from proxy.core.events.assembler import Assembler
from proxy.services.metering.limits import Ticket

# A prompt's tokens estimated from its bytes (about 4 for English text and JSON), used only for
# a stream cut before vLLM reported its usage.
BYTES_PER_TOKEN = 4

T = TypeVar("T")


class Meter:
    """One admitted request's account. Without a ticket (the key has no limits) every method
    is a no-op and `stream` hands the body on unwrapped."""

    def __init__(self, ticket: Ticket | None = None) -> None:
        self._ticket = ticket
        self._source: Callable[[], int] | None = None
        self._extra = 0
        self._owned = False  # a stream or a background job settles it, not the helper

    @property
    def counts(self) -> bool:
        """The key's tokens are counted (a `tpm` or a `token_budget`)."""
        ticket = self._ticket
        return ticket is not None and (ticket.per_minute or ticket.in_total)

    def track(self, source: Callable[[], int]) -> None:
        """`source()`: the tokens of the request's own generation so far (read at the end)."""
        self._source = source

    def charge(self, tokens: int) -> None:
        self._extra += max(0, tokens)

    def spent(self, fallback: Callable[[], int] | None = None) -> int:
        own = self._source() if self._source is not None else 0
        if not own and fallback is not None:
            own = fallback()
        return self._extra + own

    def job_limit(self) -> dict[str, Any] | None:
        """What a background job's spec carries so its worker can take the ticket over."""
        return self._ticket.job_limit() if self._ticket is not None else None

    async def hand_over(self) -> None:
        """The job is queued: its worker renews the lease and settles the job's tokens from now
        on. What this request spent itself is settled here."""
        self._owned = True
        ticket = self._ticket
        if ticket is None or ticket.ended:
            return
        ticket.hand_over()
        if self._extra:
            own = dataclasses.replace(ticket, lease=None)  # the tokens only: the lease is theirs
            await asyncio.shield(own.end(self._extra))

    async def settle(self, fallback: Callable[[], int] | None = None) -> None:
        """End the ticket with what was spent (idempotent). Shielded: a cancelled request
        still frees its stream slot and counts its tokens."""
        ticket = self._ticket
        if ticket is None or ticket.ended:
            return
        await asyncio.shield(ticket.end(self.spent(fallback)))

    async def close(self) -> None:
        """The web helper's `finally`: settle, unless a stream or a job took the meter over."""
        if not self._owned:
            await self.settle()

    @overload
    def stream(self, body: AsyncIterator[T], *,
               last: Callable[[T], bool] | None = None) -> AsyncIterator[T]: ...

    @overload
    def stream(self, body: AsyncIterator[bytes], *, prompt_bytes: int
               ) -> AsyncIterator[bytes]: ...

    def stream(self, body: AsyncIterator[Any], *, prompt_bytes: int | None = None,
               last: Callable[[Any], bool] | None = None) -> AsyncIterator[Any]:
        """`body`, settling when it is closed, with what the service said it spent (`track`,
        `charge`): a Responses stream's event batches, a cache hit. `prompt_bytes`: a chat
        stream passed through, whose deltas nobody else sees: for a stream cut before its
        usage, count its `data:` frames, with the prompt estimated from these bytes. `last`:
        tells the item that ends the stream, whose count is then whole: settled before that
        item is handed on (see `Metered`)."""
        if self._ticket is None:
            return body
        self._owned = True
        if prompt_bytes is not None:
            return MeteredRelay(self, body, prompt_bytes)
        return Metered(self, body, last)


class Metered(Generic[T]):
    """A stream handed on that settles its meter when closed, with the meter's own count (the
    service's `track`: a Responses turn's assembler knows its usage, nothing is parsed here).
    Closing settles even when the stream was never iterated (a client gone before the first
    batch): an async generator's `finally` would not run then, and the lease would be renewed
    for ever. With `ends` (what tells the item that ends the stream), settled as soon as that
    item comes, before it is handed on: the client learns the stream is over from it (the SSE
    response's end goes out with it) while the work after it (the turn's lease, the response
    cache) runs later, and settled at the close a client sending its next request at once
    could find its stream slot still held by the one it had just read to the end
    (`max_streams`, a 429). Per item: one call and that look, nothing else."""

    def __init__(self, meter: Meter, body: AsyncIterator[T],
                 ends: Callable[[T], bool] | None = None) -> None:
        self._meter = meter
        self._body = body
        self._ends = ends

    def __aiter__(self) -> Metered[T]:
        return self

    async def __anext__(self) -> T:
        item = await self._body.__anext__()
        ends = self._ends
        if ends is not None and ends(item):
            await self._meter.settle(self._streamed)
        return item

    def _streamed(self) -> int:
        """What the stream itself shows it carried, when the meter counted nothing."""
        return 0

    async def aclose(self) -> None:
        try:
            # The upstream first (vLLM stops generating), then the one round trip of the end.
            aclose = getattr(self._body, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
        finally:
            with contextlib.suppress(asyncio.CancelledError):
                await self._meter.settle(self._streamed)


class MeteredRelay(Metered[bytes]):
    """A chat stream passed through byte for byte: settled with the meter's own count, else the
    usage read from the stream's last frames, else the `data:` frames it carried; settled when
    the chunk with its `data: [DONE]` comes, before it is handed on (`Metered`'s `ends`: its
    client then knows the stream is over), else when it is closed. Per chunk: two
    assignments, one `bytes.count` and a look at its last bytes."""

    def __init__(self, meter: Meter, body: AsyncIterator[bytes], prompt_bytes: int) -> None:
        super().__init__(meter, body, _chat_ends)
        self._prompt = estimate(prompt_bytes)
        self._frames = 0
        self._previous = self._last = b""

    async def __anext__(self) -> bytes:
        chunk = await self._body.__anext__()
        self._previous, self._last = self._last, chunk
        self._frames += chunk.count(b"data:")
        if _chat_ends(chunk):
            await self._meter.settle(self._streamed)
        return chunk

    def _streamed(self) -> int:
        found = usage_in_sse(self._previous + self._last)
        if found or not self._frames:
            return found
        return self._prompt + self._frames


# The end of a chat stream (OpenAI's and vLLM's `data: [DONE]`), looked for in a chunk's last
# bytes (room for a `\r\n` line end or two).
_DONE = b"data: [DONE]"
_DONE_TAIL = len(_DONE) + 4


def _chat_ends(chunk: bytes) -> bool:
    # `find`, not `in` (core/events/sse.py `DataDecoder.feed` says why).
    return chunk.find(_DONE, -_DONE_TAIL) >= 0


def delivered(usage: dict[str, Any] | None, deltas: int, prompt: Callable[[], int]) -> int:
    """A generation's tokens: its reported `usage`, plus the output deltas streamed since that
    usage (a turn cut before reporting its own); with no usage at all, `prompt()` too."""
    if usage:
        return tokens_of(usage) + deltas
    return deltas + prompt() if deltas else 0


def estimate(*sizes: int) -> int:
    """Tokens estimated from byte counts."""
    return sum(sizes) // BYTES_PER_TOKEN


def turn_spent(assembler: Assembler, chat: dict[str, Any]) -> Callable[[], int]:
    """What a Responses turn (its assembler, fed by `chat`'s upstream stream) has spent, read
    when the request settles; the prompt estimated from `chat`'s JSON only when needed."""
    def prompt() -> int:
        return estimate(len(orjson.dumps(chat)))
    return lambda: delivered(assembler.usage, assembler.deltas, prompt)


def tokens_of(usage: object) -> int:
    """Input + output tokens of a Responses or a Chat Completions usage object."""
    if not isinstance(usage, dict):
        return 0
    total = usage.get("total_tokens")
    if isinstance(total, int):
        return total
    parts = [usage.get(name) for name in ("input_tokens", "output_tokens", "prompt_tokens",
                                          "completion_tokens")]
    return sum(part for part in parts if isinstance(part, int))


def usage_object_in_json(body: bytes | Any) -> dict[str, Any] | None:
    """The `usage` object of a JSON answer (None: none, or not JSON)."""
    try:
        data = orjson.loads(body) if isinstance(body, bytes | bytearray) else body
    except orjson.JSONDecodeError:
        return None
    usage = data.get("usage") if isinstance(data, dict) else None
    return usage if isinstance(usage, dict) else None


def usage_in_sse(tail: bytes) -> int:
    """The tokens of the last `data:` frame that carries a usage (`usage_object_in_sse`)."""
    return tokens_of(usage_object_in_sse(tail))


def usage_object_in_sse(tail: bytes) -> dict[str, Any] | None:
    """The usage in the last `data:` frame that carries one: a chat stream's usage chunk (or a
    Responses terminal event's `response.usage`, though Responses streams are metered by their
    assembler and never read back)."""
    at = tail.rfind(b'"usage"')
    while at >= 0:
        start = tail.rfind(b"data:", 0, at)
        end = tail.find(b"\n", at)
        if start >= 0:
            line = tail[start + 5: end if end >= 0 else len(tail)]
            try:
                data = orjson.loads(line)
            except orjson.JSONDecodeError:
                data = None
            if isinstance(data, dict):
                for found in (data.get("usage"), (data.get("response") or {}).get("usage")):
                    if isinstance(found, dict) and tokens_of(found):
                        return found
        at = tail.rfind(b'"usage"', 0, start if start >= 0 else 0)
    return None
