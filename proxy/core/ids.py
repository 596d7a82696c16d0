"""Object ids in OpenAI's styles (`resp_…`, `msg_…`, `rs_…`, `fc_…`, `call_…`, `conv_…`).

Random, URL-safe, 48 hex characters after the prefix like OpenAI's. Code that must be
deterministic (the assembler, tests) takes an `IdFactory` instead of calling `new_id` itself.

Every random hex string a request makes (its ids, its request id, its upstream tag) comes from
`random_hex`: the kernel's CSPRNG read 4 KiB at a time, each chunk handed out once. A request
made ~5 of them with `secrets.token_hex`, each one `getrandom` syscall (~0.7 µs of CPU alone,
~3-11 µs in py-spy's profile under load); a chunk of the buffer is ~0.27 µs. The randomness is
the same (os.urandom's bytes, never reused); a forked child forgets its parent's buffer before
it makes anything, so two processes never hand out the same bytes.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from typing import Final

IdFactory = Callable[[str], str]

RESPONSE = "resp"
MESSAGE = "msg"
REASONING = "rs"
FUNCTION_CALL = "fc"
CALL = "call"
FUNCTION_CALL_OUTPUT = "fco"
CUSTOM_TOOL_CALL = "ctc"
CUSTOM_TOOL_CALL_OUTPUT = "ctco"
CONVERSATION = "conv"
ADDITIONAL_TOOLS = "at"

# One read serves ~40 requests (~4 asks each); an ask takes a chunk of `CHUNK_BYTES` whatever
# its size (the longest ask, an id's 24 bytes; a shorter one leaves the rest of its chunk
# unused, never handed out).
BUFFER_BYTES: Final = 4080
CHUNK_BYTES: Final = 24


class RandomHex:
    """Hex digits of the kernel's CSPRNG, read `BUFFER_BYTES` at a time, each chunk handed out
    once. Lock-free and still safe off the loop: a buffer and its chunk counter are one tuple,
    `next()` on the counter is atomic, and a refill makes a new tuple (two threads refilling at
    once each hand out their own read). `take` is ~0.27 µs against secrets.token_hex's ~0.7
    (and its getrandom syscall, dearer under load: ~3-11 µs in py-spy)."""

    __slots__ = ("_read", "_state")

    def __init__(self, read: Callable[[int], bytes] = os.urandom) -> None:
        self._read = read
        self._state: tuple[str, Iterator[int]] = ("", itertools.count())

    def take(self, nbytes: int) -> str:
        """`nbytes` random bytes as 2 * nbytes lower-case hex digits (secrets.token_hex's
        form)."""
        digits, chunks = self._state
        at = next(chunks) * 2 * CHUNK_BYTES
        if at < len(digits) and nbytes <= CHUNK_BYTES:
            return digits[at:at + 2 * nbytes]
        return self._refill(nbytes)

    def _refill(self, nbytes: int) -> str:
        if nbytes > CHUNK_BYTES:
            return self._read(nbytes).hex()
        digits = self._read(BUFFER_BYTES).hex()
        self._state = (digits, itertools.count(1))  # chunk 0 is this ask's
        return digits[:2 * nbytes]

    def forget(self) -> None:
        """Drop the buffer: a forked child would hand out the bytes its parent hands out."""
        self._state = ("", itertools.count())


# The process's one source, deliberately module state like the CSPRNG it buffers: every id
# maker calls `new_id`/`random_hex` without being handed a source.
_SOURCE: Final = RandomHex()
os.register_at_fork(after_in_child=_SOURCE.forget)
random_hex = _SOURCE.take


def new_id(prefix: str) -> str:
    return f"{prefix}_{random_hex(24)}"


def counter_ids() -> IdFactory:
    """Deterministic ids (`msg_1`, `msg_2`, `fc_1`, …) for tests and golden files."""
    counts: dict[str, int] = {}

    def make(prefix: str) -> str:
        counts[prefix] = counts.get(prefix, 0) + 1
        return f"{prefix}_{counts[prefix]}"

    return make
