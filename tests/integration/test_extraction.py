"""services/files/extraction.py: a PDF is read in a child process that is
killed past its CPU seconds or when its caller goes away, so a hostile file costs the proxy's
own process (its loop, its threads) nothing and its work really stops; normal files still read.
"""

from __future__ import annotations

import asyncio
import os
import resource
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.core.documents import INVALID, PdfLimits, Unreadable
from proxy.services.files.extraction import Extractor
from tests.support.documents import pdf_sharing_one_stream, pdf_with_text

# Past the CPU bound whatever the machine: without the operator bound, minutes of CPU.
HOSTILE = pdf_sharing_one_stream(200_000, 5)
UNBOUNDED = PdfLimits(operators=10**9)


def children() -> set[int]:
    """The live (not zombie) child processes of this test process."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            out.add(int(stat.parent.name))
    return out


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@pytest.fixture
async def extractor() -> AsyncIterator[Extractor]:
    made = Extractor(processes=1, cpu_seconds=1, limits=UNBOUNDED)
    yield made
    await made.aclose()


async def test_a_normal_pdf_is_read_in_a_child_that_stays_for_the_next(
        extractor: Extractor) -> None:
    before = children()
    assert await extractor.text(pdf_with_text("Revenue grew"), "a.pdf", None) == "Revenue grew"
    child = children() - before
    assert len(child) == 1
    assert await extractor.text(pdf_with_text("Costs fell"), None, None) == "Costs fell"
    assert children() - before == child  # the same child read the second one
    assert await extractor.text(b"<p>html</p>", "x.html", None) == "html"
    assert await extractor.text(b"plain", "x.txt", None) == "plain"  # in a thread
    with pytest.raises(Unreadable):  # an unreadable file does not cost the child
        await extractor.text(b"%PDF-1.4 broken", None, None)
    assert children() - before == child and extractor.killed == 0


async def test_a_pdf_past_its_cpu_seconds_is_invalid_and_its_child_is_gone(
        extractor: Extractor) -> None:
    before, cpu = children(), own_cpu()
    with pytest.raises(Unreadable) as info:
        await extractor.text(HOSTILE, "x.pdf", None)
    assert info.value.code == INVALID and "1 s of CPU" in info.value.message
    # The proxy's own process spent little of it (the child did, and was ended), and no child
    # runs on: the work was abandoned, not left in a thread.
    assert own_cpu() - cpu < 1.0
    assert children() - before == set() and extractor.killed == 1
    assert await extractor.text(pdf_with_text("still reads"), None, None) == "still reads"


async def test_a_cancelled_caller_leaves_no_child_reading(extractor: Extractor) -> None:
    before = children()
    task = asyncio.create_task(extractor.text(HOSTILE, None, None))
    for _ in range(200):  # until its child runs (bounded: 10 s)
        if children() - before:
            break
        await asyncio.sleep(0.05)
    assert children() - before
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert children() - before == set() and extractor.killed == 1


async def test_the_loop_runs_on_while_a_child_reads(extractor: Extractor) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    cpu = own_cpu()
    with pytest.raises(Unreadable):
        await extractor.text(HOSTILE, None, None)
    ticker.cancel()
    # Bounded quantities, not latency: the loop turned (a loop held by the reading would
    # not have turned at all) and this process did not do the reading.
    assert ticks > 10
    assert own_cpu() - cpu < 1.0


async def test_a_json_file_is_checked_in_a_child_whose_memory_is_bounded() -> None:
    small = Extractor(processes=1, memory=256 * 1024 * 1024)
    try:
        assert await small.text(b'{"a": [1, 2]}', "d.json", None) == '{"a": [1, 2]}'
        with pytest.raises(Unreadable) as info:
            await small.text(b'{"a": ', "cut.json", None)
        assert info.value.code == INVALID
        # 12 MB of `[],` parse to ~16x that: past the child's 256 MiB, refused there (it
        # would have grown the proxy's own process by ~200 MB, on its loop for inline data).
        hungry = b"[" + b"[]," * 4_000_000 + b"[]]"
        cpu = own_cpu()
        with pytest.raises(Unreadable) as info:
            await small.text(hungry, None, "application/json")
        assert info.value.code == INVALID and "memory" in info.value.message
        assert own_cpu() - cpu < 1.0
    finally:
        await small.aclose()


async def test_one_key_reads_in_at_most_half_the_children_the_others_keep_the_rest() -> None:
    shared = Extractor(processes=2, cpu_seconds=1, limits=UNBOUNDED)
    try:
        hostile = [asyncio.create_task(shared.text(HOSTILE, None, None, owner="a"))
                   for _ in range(3)]
        for _ in range(200):  # until the key's first document is being read (bounded: 10 s)
            if shared.running("a"):
                break
            await asyncio.sleep(0.05)
        # Its other two wait behind its own; the second child is another key's at once.
        assert shared.running("a") == 1 and shared.per_key == 1
        assert await shared.text(pdf_with_text("mine"), None, None, owner="b") == "mine"
        assert shared.running("a") == 1 and not all(t.done() for t in hostile)
        for outcome in await asyncio.gather(*hostile, return_exceptions=True):
            assert isinstance(outcome, Unreadable)
        assert shared.running("a") == 0 and shared.killed == 3
    finally:
        await shared.aclose()
