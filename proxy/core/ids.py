"""Object ids in OpenAI's styles (`resp_…`, `msg_…`, `rs_…`, `fc_…`, `call_…`, `conv_…`).

Random, URL-safe, 48 hex characters after the prefix like OpenAI's. Code that must be
deterministic (the assembler, tests) takes an `IdFactory` instead of calling `new_id` itself.

Every random hex string a request makes (its ids, its request id, its upstream tag) comes from
`random_hex`: the kernel's CSPRNG read 4 KiB at a time, each byte handed out once. A request
made ~5 of them, each `secrets.token_hex` one `getrandom` syscall (~3-11 µs under load, in
py-spy); a slice of the buffer is ~0.3 µs. The randomness is the same (os.urandom's bytes,
never reused); a forked child forgets its parent's buffer before it makes anything, so two
processes never hand out the same bytes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
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

# One read serves ~80 requests (~50 bytes each).
BUFFER_BYTES: Final = 4096


class RandomHex:
    """Hex digits of the kernel's CSPRNG, read `BUFFER_BYTES` at a time and handed out once.
    The lock keeps two threads from taking the same slice (ids are made off the loop too)."""

    __slots__ = ("_at", "_digits", "_lock", "_read")

    def __init__(self, read: Callable[[int], bytes] = os.urandom) -> None:
        self._read = read
        self._digits = ""
        self._at = 0
        self._lock = threading.Lock()

    def __call__(self, nbytes: int) -> str:
        """`nbytes` random bytes as 2 * nbytes lower-case hex digits (secrets.token_hex's
        form)."""
        count = 2 * nbytes
        with self._lock:
            at = self._at
            end = at + count
            if end > len(self._digits):
                self._digits = self._read(max(BUFFER_BYTES, nbytes)).hex()
                at, end = 0, count
            self._at = end
            return self._digits[at:end]

    def forget(self) -> None:
        """Drop the buffer (a forked child: its parent hands out the same bytes); a new lock
        too, in case a thread of the parent held it while forking."""
        self._digits = ""
        self._at = 0
        self._lock = threading.Lock()


# The process's one source, deliberately module state like the CSPRNG it buffers: every id
# maker calls `new_id`/`random_hex` without being handed a source.
random_hex: Final = RandomHex()
os.register_at_fork(after_in_child=random_hex.forget)


def new_id(prefix: str) -> str:
    return f"{prefix}_{random_hex(24)}"


def counter_ids() -> IdFactory:
    """Deterministic ids (`msg_1`, `msg_2`, `fc_1`, …) for tests and golden files."""
    counts: dict[str, int] = {}

    def make(prefix: str) -> str:
        counts[prefix] = counts.get(prefix, 0) + 1
        return f"{prefix}_{counts[prefix]}"

    return make
