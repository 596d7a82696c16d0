"""The Files API and `input_file` parts through the official SDK,
against a real proxy on a real redis-server with the simulator as its fleet: upload (a PDF, a
multi-chunk file, exactly the size limit and one byte over), list, retrieve, content, delete;
two keys that cannot see each other's files; input_file by file_id, file_data (data URL and
bare base64) and file_url (allowed and refused), and unreadable files refused naming the part.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.documents import pdf_sharing_one_stream, pdf_with_text
from tests.support.servers import ServerProcess, start_proxy
from tests.support.webfiles import static_server

pytestmark = pytest.mark.e2e

KEY_A = "sk-files-a"
KEY_B = "sk-files-b"
# Small, so that the limit is tested exactly; still more than two of the store's 512 KiB chunks.
LIMIT = 1_300_000
MODEL = "sim-model"
PDF_TEXT = "The invoice total is 4217 euros"
METADATA = "http://169.254.169.254/latest/meta-data/"
BUDGET = 600_000


@pytest.fixture(scope="module")
def proxy(simulator: ServerProcess, redis_server: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--api-key", KEY_A, "--api-key", KEY_B,
                         "--max-file-bytes", str(LIMIT), "--fetch-allow", "http://127.0.0.1:",
                         redis_url=f"redis://127.0.0.1:{redis_server.port}/7")
    yield server
    server.stop()


def sdk(server: ServerProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


@pytest.fixture
def a(proxy: ServerProcess) -> Iterator[openai.OpenAI]:
    with sdk(proxy, KEY_A) as client:
        yield client


@pytest.fixture
def b(proxy: ServerProcess) -> Iterator[openai.OpenAI]:
    with sdk(proxy, KEY_B) as client:
        yield client


@pytest.fixture(scope="module")
def documents() -> Iterator[str]:
    """A local web server (127.0.0.1, admitted by --fetch-allow) serving a PDF and an HTML page."""
    with static_server({
            "/report.pdf": ("application/pdf", pdf_with_text(PDF_TEXT)),
            "/page.html": ("text/html", b"<html><body><h1>Release</h1><script>x()</script>"
                                        b"<p>Ships on <b>Tuesday</b></p></body></html>")}) as url:
        yield url


def ask(client: openai.OpenAI, part: dict[str, Any]) -> str:
    response = client.responses.create(model=MODEL, input=[{"role": "user", "content": [
        {"type": "input_text", "text": "Summarise:"}, part]}])  # type: ignore[list-item]
    assert response.status == "completed"
    return response.output_text


def refused(client: openai.OpenAI, part: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, part)
    error: dict[str, Any] = caught.value.body  # type: ignore[assignment]
    return error


def test_a_file_goes_through_upload_list_retrieve_content_and_delete(
        a: openai.OpenAI) -> None:
    made = a.files.create(file=("notes.md", b"# Notes\n\nbuy milk\n", "text/markdown"),
                          purpose="user_data")
    assert made.id.startswith("file-")
    assert (made.object, made.status, made.bytes, made.filename, made.purpose) == (
        "file", "processed", 18, "notes.md", "user_data")
    assert made.expires_at is not None and made.expires_at > made.created_at
    assert a.files.retrieve(made.id) == made
    assert made.id in [f.id for f in a.files.list()]
    assert made.id in [f.id for f in a.files.list(purpose="user_data")]
    assert made.id not in [f.id for f in a.files.list(purpose="batch")]
    assert a.files.content(made.id).content == b"# Notes\n\nbuy milk\n"
    deleted = a.files.delete(made.id)
    assert (deleted.id, deleted.deleted) == (made.id, True)
    with pytest.raises(openai.NotFoundError):
        a.files.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        a.files.delete(made.id)
    assert made.id not in [f.id for f in a.files.list()]


def test_the_list_pages_with_the_sdks_cursor(a: openai.OpenAI) -> None:
    ids = {a.files.create(file=(f"p{i}.txt", b"page", "text/plain"), purpose="user_data").id
           for i in range(5)}
    page = a.files.list(limit=2)
    assert len(page.data) == 2 and page.has_more
    seen = {f.id for f in a.files.list(limit=2)}  # the SDK's auto-pagination walks every page
    assert ids <= seen


def test_exactly_the_size_limit_is_accepted_and_one_byte_more_is_a_413(
        a: openai.OpenAI) -> None:
    data = bytes(range(256)) * (LIMIT // 256) + b"x" * (LIMIT % 256)
    assert len(data) == LIMIT
    made = a.files.create(file=("big.bin", data, "application/octet-stream"),
                          purpose="user_data")
    assert made.bytes == LIMIT
    assert a.files.content(made.id).content == data  # three chunks back in order
    with pytest.raises(openai.APIStatusError) as caught:
        a.files.create(file=("big.bin", data + b"y", "application/octet-stream"),
                       purpose="user_data")
    assert caught.value.status_code == 413
    assert caught.value.body["type"] == "invalid_request_error"  # type: ignore[index]


def test_a_body_far_over_the_limit_is_refused_as_it_streams_in(proxy: ServerProcess) -> None:
    """A chunked upload (no Content-Length) is cut off once it passes the limit."""
    def body() -> Iterator[bytes]:
        yield b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n\r\n"
        for _ in range(100):  # 100 MiB offered; the proxy must stop reading long before
            yield b"z" * (1 << 20)

    answer = httpx.post(f"{proxy.url}/v1/files", content=body(), timeout=30, headers={
        "authorization": f"Bearer {KEY_A}", "content-type": "multipart/form-data; boundary=b"})
    assert answer.status_code == 413


def test_another_keys_files_are_unknown_ids(a: openai.OpenAI, b: openai.OpenAI) -> None:
    mine = a.files.create(file=("secret.txt", b"the vault code is 0451", "text/plain"),
                          purpose="user_data")
    with pytest.raises(openai.NotFoundError):
        b.files.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        b.files.content(mine.id)
    with pytest.raises(openai.NotFoundError):
        b.files.delete(mine.id)
    assert mine.id not in [f.id for f in b.files.list()]
    error = refused(b, {"type": "input_file", "file_id": mine.id})
    assert error["param"] == "input[0].content[1].file_id"
    assert "0451" not in str(error)
    assert "0451" in ask(a, {"type": "input_file", "file_id": mine.id})
    assert a.files.retrieve(mine.id).id == mine.id  # B's delete did nothing


def test_an_uploaded_pdf_is_read_by_file_id(a: openai.OpenAI) -> None:
    made = a.files.create(file=("invoice.pdf", pdf_with_text(PDF_TEXT), "application/pdf"),
                          purpose="user_data")
    assert PDF_TEXT in ask(a, {"type": "input_file", "file_id": made.id})


def test_inline_file_data_is_read_as_a_data_url_and_as_bare_base64(a: openai.OpenAI) -> None:
    encoded = base64.b64encode(pdf_with_text(PDF_TEXT)).decode()
    for data in (f"data:application/pdf;base64,{encoded}", encoded):
        answer = ask(a, {"type": "input_file", "filename": "invoice.pdf", "file_data": data})
        assert PDF_TEXT in answer
        assert "endobj" not in answer and "Tj" not in answer  # the text layer, not the source


def test_an_allowed_file_url_is_fetched_and_html_loses_its_tags(
        a: openai.OpenAI, documents: str) -> None:
    assert PDF_TEXT in ask(a, {"type": "input_file", "file_url": f"{documents}/report.pdf"})
    text = ask(a, {"type": "input_file", "file_url": f"{documents}/page.html"})
    assert "Ships on Tuesday" in text
    assert "<p>" not in text and "x()" not in text


def test_a_file_url_outside_fetch_allow_is_refused_naming_the_part(
        a: openai.OpenAI, documents: str) -> None:
    error = refused(a, {"type": "input_file", "file_url": METADATA})
    assert error["param"] == "input[0].content[1].file_url"
    # The same request with an admitted URL is answered: the refusal is the URL's.
    assert PDF_TEXT in ask(a, {"type": "input_file", "file_url": f"{documents}/report.pdf"})


def test_unreadable_files_are_a_400_naming_the_part_with_the_sdks_codes(
        a: openai.OpenAI) -> None:
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 32).decode()
    error = refused(a, {"type": "input_file", "filename": "cat.png", "file_data": png})
    assert (error["param"], error["code"]) == ("input[0].content[1]", "unsupported_file")
    broken = base64.b64encode(b"%PDF-1.4\nthis is no pdf").decode()
    error = refused(a, {"type": "input_file", "filename": "x.pdf", "file_data": broken})
    assert (error["param"], error["code"]) == ("input[0].content[1]", "invalid_file")
    stored = a.files.create(file=("cat.png", base64.b64decode(png), "image/png"),
                            purpose="user_data")
    error = refused(a, {"type": "input_file", "file_id": stored.id})
    assert (error["param"], error["code"]) == ("input[0].content[1]", "unsupported_file")


def test_a_pdf_past_the_per_document_bounds_is_a_400_invalid_file(a: openai.OpenAI) -> None:
    # The 3.3 KB PDF that cost 58 s of CPU, read in an extraction child and
    # stopped at 250,000 operators; the proxy answers meanwhile.
    stored = a.files.create(file=("h.pdf", pdf_sharing_one_stream(200_000, 5),
                                  "application/pdf"), purpose="user_data")
    error = refused(a, {"type": "input_file", "file_id": stored.id})
    assert (error["param"], error["code"]) == ("input[0].content[1]", "invalid_file")
    assert "operators" in error["message"]


@pytest.fixture(scope="module")
def small(simulator: ServerProcess) -> Iterator[ServerProcess]:
    """No keys (an open proxy), the embedded store, a small --max-body-bytes and budget."""
    server = start_proxy(simulator.url, "--max-body-bytes", "100000",
                         "--max-stored-bytes-per-key", str(BUDGET))
    yield server
    server.stop()


def test_a_files_text_counts_in_what_the_request_expands_to(small: ServerProcess) -> None:
    with sdk(small, "sk-any") as client:
        made = client.files.create(file=("long.txt", b"word " * 30_000, "text/plain"),
                                   purpose="user_data")  # larger than a body, as a file may be
        assert made.bytes == 150_000
        error = refused(client, {"type": "input_file", "file_id": made.id})
        assert error["param"] == "input[0].content[1]"
        assert "--max-body-bytes" in error["message"]
        fits = client.files.create(file=("short.txt", b"word " * 100, "text/plain"),
                                   purpose="user_data")
        assert "word word" in ask(client, {"type": "input_file", "file_id": fits.id})


def test_an_open_proxy_refuses_uploads_from_another_sites_pages(small: ServerProcess) -> None:
    form = {"purpose": (None, "user_data"), "file": ("a.txt", b"hello", "text/plain")}
    foreign = httpx.post(f"{small.url}/v1/files", files=form, timeout=10,
                         headers={"origin": "https://evil.example"})
    assert foreign.status_code == 403
    assert httpx.post(f"{small.url}/v1/files", files=form, timeout=10).status_code == 200


def test_files_count_in_the_keys_storage_budget(small: ServerProcess) -> None:
    with sdk(small, "sk-any") as client:
        made = []
        with pytest.raises(openai.RateLimitError) as caught:
            for i in range(BUDGET // 100_000 + 1):  # the budget is held after at most these
                made.append(client.files.create(file=(f"f{i}.bin", b"b" * 100_000,
                                                      "application/octet-stream"),
                                                purpose="user_data").id)
        assert caught.value.code == "insufficient_quota"
        for file_id in made:  # a delete gives its bytes back
            client.files.delete(file_id)
        client.files.create(file=("again.bin", b"b" * 100_000, "application/octet-stream"),
                            purpose="user_data")


def test_a_background_create_reads_the_file_and_keeps_only_its_reference(
        a: openai.OpenAI) -> None:
    made = a.files.create(file=("invoice.pdf", pdf_with_text(PDF_TEXT), "application/pdf"),
                          purpose="user_data")
    queued = a.responses.create(model=MODEL, background=True, input=[{"role": "user", "content": [
        {"type": "input_file", "file_id": made.id}]}])
    final = queued
    for _ in range(100):
        final = a.responses.retrieve(queued.id)
        if final.status not in ("queued", "in_progress"):
            break
        time.sleep(0.05)
    assert final.status == "completed"
    assert PDF_TEXT in final.output_text
    items = a.responses.input_items.list(queued.id).data
    assert items[0].content[0].file_id == made.id  # type: ignore[union-attr]


SLOW_HEAD = (b"--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nuser_data\r\n"
             b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"slow.bin\"\r\n"
             b"Content-Type: application/octet-stream\r\n\r\n")
SLOW_DATA = bytes(range(256)) * (2 * 2**20 // 256)  # 2 MiB: past the 1 MiB spool in memory


class HeldUpload:
    """An upload of `SLOW_DATA` whose body stops half-way (its slot held, its spool on disk)
    until `release()`: `start` returns once the proxy has the first half."""

    def __init__(self, client: httpx.AsyncClient, key: str | None = None) -> None:
        self._client = client
        self._headers = {"content-type": "multipart/form-data; boundary=b",
                         **({"authorization": f"Bearer {key}"} if key else {})}
        self._resume = asyncio.Event()
        self._task: asyncio.Task[httpx.Response] | None = None

    async def start(self) -> None:
        halfway = asyncio.Event()
        half = len(SLOW_DATA) // 2

        async def body() -> AsyncIterator[bytes]:
            yield SLOW_HEAD + SLOW_DATA[:half]
            halfway.set()
            await self._resume.wait()
            yield SLOW_DATA[half:] + b"\r\n--b--\r\n"

        self._task = asyncio.create_task(self._client.post("/v1/files", content=body(),
                                                           headers=self._headers))
        await asyncio.wait_for(halfway.wait(), 10)
        await asyncio.sleep(0.3)  # the first half is with the proxy: its slot is held

    async def release(self) -> httpx.Response:
        assert self._task is not None
        self._resume.set()
        return await asyncio.wait_for(self._task, 30)


async def _small_upload(client: httpx.AsyncClient, key: str | None = None) -> httpx.Response:
    return await client.post("/v1/files", files={"file": ("x.bin", b"x" * 64)},
                             data={"purpose": "user_data"},
                             headers={"authorization": f"Bearer {key}"} if key else None)


def test_uploads_past_the_in_flight_limit_are_a_429_before_their_body_is_read(
        simulator: ServerProcess) -> None:
    """`--max-uploads-in-flight 1`: while one upload streams in (2 MiB, past the spool size, held
    half-way), another is refused at once, 429 with Retry-After, and the first still completes;
    once it has, the next upload is taken. The limit bounds the temporary files (the k8s
    manifest sizes /tmp from it)."""
    server = start_proxy(simulator.url, "--max-uploads-in-flight", "1")

    async def scenario() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            first = HeldUpload(client)
            await first.start()
            refused = await _small_upload(client)
            done = await first.release()
            after = await _small_upload(client)
        return refused, done, after

    try:
        refused, done, after = asyncio.run(scenario())
    finally:
        server.stop()
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert done.status_code == 200, done.text
    assert done.json()["bytes"] == len(SLOW_DATA)
    assert after.status_code == 200, after.text


def test_one_key_takes_at_most_half_the_upload_slots(simulator: ServerProcess) -> None:
    """`--max-uploads-in-flight 2`, two keys: while key A's upload streams in slowly (its one
    slot of the two, half of them), A's next upload is a 429 naming the per-key share, and key
    B's upload is taken: a tenant sending its bodies slowly cannot shut the others' uploads
    out. Once A's first is done, A uploads again."""
    server = start_proxy(simulator.url, "--max-uploads-in-flight", "2",
                         "--api-key", KEY_A, "--api-key", KEY_B)

    async def scenario() -> tuple[httpx.Response, ...]:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            held = HeldUpload(client, KEY_A)
            await held.start()
            refused = await _small_upload(client, KEY_A)
            other = await _small_upload(client, KEY_B)
            done = await held.release()
            again = await _small_upload(client, KEY_A)
        return refused, other, done, again

    try:
        refused, other, done, again = asyncio.run(scenario())
    finally:
        server.stop()
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert "This key's uploads in flight on this server are at its share (1 at once)" in \
        error["message"], error
    assert other.status_code == 200, other.text
    assert done.status_code == 200, done.text
    assert done.json()["bytes"] == len(SLOW_DATA)
    assert again.status_code == 200, again.text


def test_a_body_that_stops_arriving_is_a_408_and_frees_its_upload_slot(
        simulator: ServerProcess) -> None:
    """`--body-timeout 1`: an upload whose body stops half-way (the connection left open) is
    answered 408 after a second, and its slot (`--max-uploads-in-flight 1`) is free again for
    the next upload. Only the body's reads are timed: a stream that runs longer than the
    timeout after its body was read is whole."""
    server = start_proxy(simulator.url, "--max-uploads-in-flight", "1", "--body-timeout", "1")
    head = (b"--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nuser_data\r\n"
            b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"stuck.bin\"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n")

    async def stalled_upload() -> tuple[bytes, float]:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"POST /v1/files HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: multipart/form-data; boundary=b\r\n"
                     b"Content-Length: %d\r\n\r\n" % (len(head) + 2**21) + head + b"z" * 2**20)
        await writer.drain()
        started = time.monotonic()
        # Half the body never comes: the answer must.
        head_block = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 15)
        waited = time.monotonic() - started
        length = int(next(line.split(b":", 1)[1] for line in head_block.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        answer = head_block + await asyncio.wait_for(reader.readexactly(length), 5)
        writer.close()
        return answer, waited

    try:
        answer, waited = asyncio.run(stalled_upload())
        with sdk(server, "unused") as client:
            made = client.files.create(file=("next.bin", b"n" * 64), purpose="user_data")
            events = list(client.responses.create(
                model=MODEL, input="[[sim tokens=30 delay_ms=80]] slow", stream=True))
    finally:
        server.stop()
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 408 Request Timeout", answer[:200]
    assert b'"code":"request_timeout"' in rest.replace(b" ", b""), rest[-300:]
    assert b'"type":"invalid_request_error"' in rest.replace(b" ", b""), rest[-300:]
    assert 0.8 <= waited < 10, waited
    assert made.bytes == 64  # the stalled upload's slot was given back
    assert events[-1].type == "response.completed"  # 30 x 80 ms: past the body timeout
