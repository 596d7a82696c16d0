"""The ids' randomness (core/ids.py `RandomHex`): the kernel's CSPRNG read 4 KiB at a time
instead of one syscall per id, every chunk handed out once, and never the same bytes in a
forked child as in its parent."""

from __future__ import annotations

import contextvars
import os
import threading

import pytest

from proxy.core import ids
from proxy.core.ids import BUFFER_BYTES, CHUNK_BYTES, RandomHex

PER_READ = BUFFER_BYTES // CHUNK_BYTES


class Kernel:
    """A stand-in CSPRNG whose bytes never repeat (a counter), counting its reads."""

    def __init__(self) -> None:
        self.reads: list[int] = []
        self.given = b""

    def __call__(self, n: int) -> bytes:
        self.reads.append(n)
        start = len(self.given)
        out = b"".join((start + i).to_bytes(4, "big") for i in range(0, n, 4))[:n]
        self.given += out
        return out


def test_one_read_serves_many_asks_and_each_chunk_is_handed_out_once() -> None:
    kernel = Kernel()
    take = RandomHex(read=kernel).take
    made = [take(CHUNK_BYTES) for _ in range(PER_READ)]
    assert kernel.reads == [BUFFER_BYTES]
    assert "".join(made) == kernel.given.hex()
    short = take(4)  # the buffer is spent: a fresh read, nothing reused
    assert kernel.reads == [BUFFER_BYTES, BUFFER_BYTES]
    assert short == kernel.given[BUFFER_BYTES:BUFFER_BYTES + 4].hex()
    assert take(16) == kernel.given[BUFFER_BYTES + CHUNK_BYTES:][:16].hex()  # the next chunk


def test_a_larger_ask_than_a_chunk_reads_its_own() -> None:
    kernel = Kernel()
    assert len(RandomHex(read=kernel).take(CHUNK_BYTES + 8)) == 2 * (CHUNK_BYTES + 8)
    assert kernel.reads == [CHUNK_BYTES + 8]


def test_threads_never_share_a_chunk() -> None:
    take = RandomHex().take
    made: list[str] = []

    def work() -> None:
        made.extend(take(CHUNK_BYTES) for _ in range(3 * PER_READ))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(made) == len(set(made)) == 4 * 3 * PER_READ


def test_every_random_string_of_a_request_comes_from_the_one_buffer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.core.shardtags import TAGS, tagged_id
    from proxy.web.middleware.access import new_request_id, request_context

    kernel = Kernel()
    source = ids._SOURCE
    monkeypatch.setattr(source, "_read", kernel)
    source.forget()
    made = [ids.new_id("resp"), new_request_id(), tagged_id("resp", TAGS[0]),
            # In a context of its own: `request_context` makes its context current, as it does
            # in each request's task; here it would outlive the test in the worker's thread.
            contextvars.Context().run(request_context, "client-1", new_request_id, [],
                                      []).upstream_tag]
    assert kernel.reads == [BUFFER_BYTES]
    assert [len(m) for m in made] == [5 + 48, 4 + 32, 5 + len(TAGS[0]) + 1 + 44, 8]
    digits = kernel.given.hex()
    assert all(m.rsplit("_", 1)[-1] in digits for m in made)
    source.forget()  # the stand-in's bytes go with it


def test_a_forked_child_never_hands_out_its_parents_bytes() -> None:
    ids.new_id("resp")  # the parent's buffer holds bytes not yet handed out
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        os.write(writer, ids.new_id("resp").encode())
        os._exit(0)
    os.close(writer)
    try:
        theirs = os.read(reader, 100).decode()
    finally:
        os.close(reader)
        os.waitpid(child, 0)
    assert theirs != ids.new_id("resp")
    assert len(theirs) == 5 + 48
