"""The ids' randomness (core/ids.py `RandomHex`): the kernel's CSPRNG read 4 KiB at a time
instead of one syscall per id, every byte handed out once, and never the same bytes in a
forked child as in its parent."""

from __future__ import annotations

import os

import pytest

from proxy.core import ids
from proxy.core.ids import BUFFER_BYTES, RandomHex


class Kernel:
    """A stand-in CSPRNG whose bytes never repeat (a counter), counting its reads."""

    def __init__(self) -> None:
        self.reads: list[int] = []
        self.made = 0

    def __call__(self, n: int) -> bytes:
        self.reads.append(n)
        out = bytes((self.made + i) % 251 for i in range(n))
        self.made += n
        return out


def test_one_read_serves_many_ids_and_each_byte_is_handed_out_once() -> None:
    kernel = Kernel()
    source = RandomHex(read=kernel)
    per_read = BUFFER_BYTES // 24
    made = [source(24) for _ in range(per_read)]
    assert kernel.reads == [BUFFER_BYTES]
    assert "".join(made) == bytes(i % 251 for i in range(per_read * 24)).hex()
    nxt = source(24)  # the rest of the buffer is too short: a fresh read, nothing reused
    assert kernel.reads == [BUFFER_BYTES, BUFFER_BYTES]
    assert nxt == bytes((BUFFER_BYTES + i) % 251 for i in range(24)).hex()


def test_a_larger_ask_than_the_buffer_reads_enough() -> None:
    kernel = Kernel()
    assert len(RandomHex(read=kernel)(BUFFER_BYTES + 8)) == 2 * (BUFFER_BYTES + 8)
    assert kernel.reads == [BUFFER_BYTES + 8]


def test_every_id_of_a_request_reads_the_kernel_once_per_buffer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.core.shardtags import TAGS, tagged_id
    from proxy.web.middleware.access import new_request_id, request_context

    kernel = Kernel()
    monkeypatch.setattr(ids, "random_hex", RandomHex(read=kernel))
    made = [ids.new_id("resp"), new_request_id(), tagged_id("resp", TAGS[0]),
            request_context("client-1", new_request_id, [], []).upstream_tag]
    assert kernel.reads == [BUFFER_BYTES]
    assert [len(m) for m in made] == [5 + 48, 4 + 32, 5 + len(TAGS[0]) + 1 + 44, 8]


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
