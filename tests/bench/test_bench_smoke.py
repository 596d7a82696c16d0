"""The benchmark harness, end to end: a tiny matrix through the real servers, and proof that a
broken stream cannot pass for a fast one.

1. `run_bench` with concurrency 2, 0 ms/token, 16-token answers, `direct` and `responses`:
   both rows have data and no errors, and the raw JSON is written (docs are not touched).
2. The stream checker on the bodies recorded in that run: intact bodies pass however they are
   split into pieces; a missing delta, a missing terminal event or `[DONE]`, and a wrong token
   count are errors.
3. The load generator against a stub server that answers broken streams, a 500 and a stall:
   every such request counts as an error of its row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import pytest

from bench.checks import CHAT_DELTA, RESPONSES_DELTA, StreamKind, check_body
from bench.loadgen import RowPlan, RowRun, run_row
from bench.run import BenchResult, parse_options, run_bench
from bench.systems import SYSTEMS

pytestmark = [pytest.mark.e2e, pytest.mark.bench_rows]

TOKENS = 16


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> BenchResult:
    results = tmp_path_factory.mktemp("bench-results")
    options = parse_options([
        "--systems", "direct,responses", "--concurrency", "2", "--delays", "0",
        "--tokens", str(TOKENS), "--seconds", "0.5", "--waves", "1", "--max-seconds", "5",
        "--warmup-seconds", "0.3", "--no-docs", "--results-dir", str(results),
    ])
    options.capture = True
    options.idle_seconds = 0.2
    lines: list[str] = []
    return run_bench(options, out=lines.append)


def test_tiny_matrix_rows_have_data_and_no_errors(tiny: BenchResult) -> None:
    assert [r.system for r in tiny.rows] == ["direct", "responses"]
    for row in tiny.rows:
        assert row.errors == 0, row.error_kinds
        assert row.requests > 0 and row.tps > 0 and row.total_tokens >= TOKENS
        assert row.ttft_ms["p50"] is not None and row.latency_ms["p99"] is not None
        assert row.upstream["streams_started"] == row.upstream["requests_sent"]
    responses = tiny.rows[1]
    assert responses.tps_ratio is not None and responses.proxy_cpu_ms_per_1k is not None
    assert tiny.json_path is not None and tiny.json_path.exists()
    assert all(t.name for t in tiny.targets)


def frames(body: bytes) -> list[bytes]:
    return [f + b"\n\n" for f in body.split(b"\n\n") if f]


def recorded(tiny: BenchResult, system: str) -> bytes:
    body = tiny.captured[(system, 2, 0.0)]
    assert body
    return body


@pytest.mark.parametrize("piece", [0, 1, 7, 100])
def test_intact_recorded_streams_pass_in_any_pieces(tiny: BenchResult, piece: int) -> None:
    assert check_body("chat", recorded(tiny, "direct"), TOKENS, piece) is None
    assert check_body("responses", recorded(tiny, "responses"), TOKENS, piece) is None


def _without_one(body: bytes, marker: bytes) -> bytes:
    parts = frames(body)
    hits = [i for i, f in enumerate(parts) if marker in b"\n" + f and b'"content":""' not in f]
    assert hits
    del parts[hits[len(hits) // 2]]
    return b"".join(parts)


def _without_last(body: bytes) -> bytes:
    return b"".join(frames(body)[:-1])


@pytest.mark.parametrize(("kind", "system", "marker"), [
    ("chat", "direct", CHAT_DELTA), ("responses", "responses", RESPONSES_DELTA)])
def test_broken_recorded_streams_are_errors(tiny: BenchResult, kind: StreamKind, system: str,
                                            marker: bytes) -> None:
    body = recorded(tiny, system)
    for piece in (0, 5):
        missing = check_body(kind, _without_one(body, marker), TOKENS, piece)
        assert missing is not None and f"{TOKENS - 1}" in missing
        unterminated = check_body(kind, _without_last(body), TOKENS, piece)
        assert unterminated is not None
        assert check_body(kind, body, TOKENS + 1, piece) is not None
        assert check_body(kind, body, TOKENS - 1, piece) is not None
    if kind == "responses":
        failed = body.replace(b"event: response.completed", b"event: response.failed")
        assert check_body(kind, failed, TOKENS) is not None


# -- the load generator against broken servers --------------------------------------------------

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def chunked(body: bytes, status: str = "200 OK") -> bytes:
    head = (f"HTTP/1.1 {status}\r\ncontent-type: text/event-stream\r\n"
            "transfer-encoding: chunked\r\n\r\n").encode()
    return head + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"


def answering(response: bytes, *, stall: bool = False) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                writer.write(response[: len(response) // 2] if stall else response)
                await writer.drain()
                if stall:
                    await asyncio.sleep(5)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return handle


def run_against(handler: Handler, kind: StreamKind, *, timeout: float = 2.0) -> RowRun[None]:
    async def main() -> RowRun[None]:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        plan = RowPlan(host="127.0.0.1", port=port,
                       request=SYSTEMS["direct"].request("127.0.0.1", port, TOKENS, 0),
                       kind=kind, tokens=TOKENS, concurrency=2, ramp=0.0, min_seconds=0.2,
                       max_seconds=1.0, timeout=timeout, waves=1)
        try:
            return await run_row(plan, lambda: None)
        finally:
            server.close()
            await server.wait_closed()

    return asyncio.run(main())


@pytest.fixture
def broken_bodies(tiny: BenchResult) -> Iterator[dict[str, bytes]]:
    chat = recorded(tiny, "direct")
    responses = recorded(tiny, "responses")
    yield {"chat-missing-delta": _without_one(chat, CHAT_DELTA),
           "chat-no-done": _without_last(chat),
           "responses-missing-delta": _without_one(responses, RESPONSES_DELTA),
           "responses-no-terminal": _without_last(responses)}


def test_loadgen_passes_intact_streams_from_the_stub(tiny: BenchResult) -> None:
    cases: tuple[tuple[StreamKind, str], ...] = (("chat", "direct"), ("responses", "responses"))
    for kind, system in cases:
        run = run_against(answering(chunked(recorded(tiny, system))), kind)
        assert run.samples and all(s.error is None for s in run.samples), run.samples[:3]
        assert all(s.tokens == TOKENS for s in run.samples)


def test_loadgen_counts_broken_streams_as_errors(broken_bodies: dict[str, bytes]) -> None:
    for name, body in broken_bodies.items():
        kind: StreamKind = "chat" if name.startswith("chat") else "responses"
        run = run_against(answering(chunked(body)), kind)
        assert run.samples, name
        assert all(s.error is not None for s in run.samples), name


def test_loadgen_counts_http_errors_and_stalls(tiny: BenchResult) -> None:
    error = run_against(answering(chunked(b'{"error": {}}', "500 Internal Server Error")),
                        "chat")
    assert error.samples and all(s.error == "HTTP 500" for s in error.samples)
    message = b'{"error": {"message": "no replica", "type": "x", "param": null, "code": 503}}'
    refused = run_against(answering(chunked(message, "503 Service Unavailable")), "chat")
    assert refused.samples
    assert all(s.error == "HTTP 503: no replica" for s in refused.samples)
    stalled = run_against(answering(chunked(recorded(tiny, "direct")), stall=True), "chat",
                          timeout=0.3)
    assert stalled.samples and all(s.error == "timeout" for s in stalled.samples)


@pytest.mark.parametrize(("kind", "body", "verdict"), [
    ("chat-json", b'{"choices":[{"finish_reason":"stop"}],"usage":{"completion_tokens":4}}', None),
    ("chat-json", b'{"choices":[{"finish_reason":"length"}],"usage":{"completion_tokens":4}}',
     "answer not completed"),
    ("responses-json", b'{"status":"completed","usage":{"output_tokens":4}}', None),
    ("responses-json", b'{"status":"completed","usage":{"output_tokens":3}}',
     "3 output tokens, expected 4"),
    ("responses-json", b'{"status":"failed","usage":null}', "not a whole JSON answer"),
    ("responses-json", b'{"status":"compl', "not a whole JSON answer"),
])
def test_whole_json_answers_are_checked_once_whole(kind: StreamKind, body: bytes,
                                                   verdict: str | None) -> None:
    assert check_body(kind, body, 4, piece=7) == verdict
