"""An input_file is measured against what is left of the request's expansion budget before it
is read: a stored file by its recorded size, a URL's download as it arrives,
a PDF's text as it is extracted. A 157-byte request naming a large file used to make the proxy
read all of it (+71 MiB) before refusing it; now the refusal allocates next to nothing.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.ids import counter_ids
from proxy.core.request.expansion import Expansion
from proxy.core.request.items import parse_input
from proxy.core.seal import Sealer
from proxy.services.files.extraction import Extractor
from proxy.services.files.files import Files
from proxy.services.fleet.media import MediaFetcher
from proxy.services.responses.inputs import RequestInputs
from tests.support.documents import pdf_sharing_one_stream
from tests.support.ingestion import Blobs, Budget, text_of

LIMIT = 100_000  # the request's --max-body-bytes
BIG = 8 * 1024 * 1024
SEALER = Sealer((b"test-secret",), 1 << 20)


def request(*parts: dict[str, Any]) -> list[Any]:
    return parse_input([{"role": "user", "content": [{"type": "input_text", "text": "read"},
                                                     *parts]}], counter_ids(), max_items=8)


@pytest.fixture
async def extractor() -> AsyncIterator[Extractor]:
    made = Extractor(processes=1)
    yield made
    await made.aclose()


def inputs(blobs: Blobs, extractor: Extractor) -> RequestInputs:
    files = Files(blobs, Budget(), ttl=3600, max_bytes=64 << 20,  # type: ignore[arg-type]
                  max_in_flight=1, extractor=extractor)
    # The fetcher's own bound is a default body's: only the request's budget is small.
    return RequestInputs(MediaFetcher(("http://127.0.0.1:",), timeout=10, max_bytes=16 << 20),
                         files, extractor=extractor)


async def refused_with_peak(work: Awaitable[Any]) -> tuple[InvalidRequest, int]:
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRequest) as info:
            await work
        return info.value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def test_a_stored_file_larger_than_the_budget_is_refused_unread(
        extractor: Extractor) -> None:
    blobs = Blobs(text_of(BIG), "big.txt")
    items = request({"type": "input_file", "file_id": "file-1"})
    error, peak = await refused_with_peak(inputs(blobs, extractor).for_items(
        "t", items, [], "input", Expansion(LIMIT, SEALER)))
    assert error.param == "input[0].content[1]" and "--max-body-bytes" in error.message
    assert blobs.reads == 0
    assert peak < 256 * 1024  # the file is 8 MiB; reading it first cost at least that


async def test_the_second_file_is_measured_against_what_the_first_left(
        extractor: Extractor) -> None:
    blobs = Blobs(text_of(60_000), "part.txt", count=2)
    one = {"type": "input_file", "file_id": "file-1"}
    media = await inputs(blobs, extractor).for_items("t", request(one), [], "input",
                                                     Expansion(LIMIT, SEALER))
    assert len(media["\0file:file-1"]) == 60_000
    both = request(one, {"type": "input_file", "file_id": "file-2"})
    with pytest.raises(InvalidRequest) as info:
        await inputs(blobs, extractor).for_items("t", both, [], "input",
                                                 Expansion(LIMIT, SEALER))
    assert info.value.param == "input[0].content[2]"
    assert "more than the 40000 bytes" in info.value.message
    assert blobs.reads == 2  # the first twice; the second never


@contextlib.contextmanager
def file_server(files: dict[str, bytes], where: Path) -> Iterator[str]:
    """A static server in its own process (one in a thread of this one would count its own
    copies of the bodies in this process's allocations)."""
    for name, body in files.items():
        (where / name).write_bytes(body)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                               "--directory", str(where), str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):  # until it listens (bounded: 10 s)
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


async def test_a_file_urls_download_stops_at_what_the_budget_leaves(
        extractor: Extractor, tmp_path: Path) -> None:
    files = {"big.txt": text_of(4 * 1024 * 1024), "small.txt": b"small enough"}
    with file_server(files, tmp_path) as base:
        small = request({"type": "input_file", "file_url": f"{base}/small.txt"})
        got = await inputs(Blobs(b"", "x"), extractor).for_items(
            "t", small, [], "input", Expansion(LIMIT, SEALER))
        assert list(got.values()) == ["small enough"]
        items = request({"type": "input_file", "file_url": f"{base}/big.txt"})
        error, peak = await refused_with_peak(inputs(Blobs(b"", "x"), extractor).for_items(
            "t", items, [], "input", Expansion(LIMIT, SEALER)))
    assert error.param == "input[0].content[1].file_url"
    assert "--max-body-bytes" in error.message
    assert peak < 1024 * 1024  # the whole download (4 MiB, 5.3 MiB as base64) never held


async def test_an_inline_pdfs_text_past_the_budget_is_refused_naming_the_part(
        extractor: Extractor) -> None:
    pdf = pdf_sharing_one_stream(200, 5, "x" * 1000)  # 200,000 characters a page, ~1 KB
    data = "data:application/pdf;base64," + base64.b64encode(pdf).decode()
    items = request({"type": "input_file", "filename": "x.pdf", "file_data": data})
    with pytest.raises(InvalidRequest) as info:
        await inputs(Blobs(b"", "x"), extractor).for_items("t", items, [], "input",
                                                           Expansion(LIMIT, SEALER))
    assert info.value.param == "input[0].content[1]"
    assert "--max-body-bytes" in info.value.message


async def test_a_record_whose_size_is_wrong_is_still_read_whole_and_bounded(
        extractor: Extractor) -> None:
    files = Files(Blobs(b"", "x"), Budget(), ttl=3600, max_bytes=1 << 20,  # type: ignore[arg-type]
                  max_in_flight=1, extractor=extractor)
    for recorded, data in ((10, b"longer than recorded"), (40, b"shorter")):
        blobs = Blobs(data, "x.txt")
        blobs.meta["bytes"] = recorded
        files._blobs = blobs
        assert await files.text_of("t", "file-1", "input", limit=50) == data.decode()
    blobs.data = b"x" * 60
    with pytest.raises(InvalidRequest) as info:
        await files.text_of("t", "file-1", "input", limit=50)
    assert "60 bytes" in info.value.message
