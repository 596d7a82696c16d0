"""The access log and the request id: one line per request
with method, route template, status, duration, request id, key id, cache and replica, in text
and JSON; the id accepted or generated, echoed on JSON, SSE and error answers, sent upstream, and
on every log line of the request; never a prompt, an output or a key in the log."""

from __future__ import annotations

import asyncio
import io
import logging
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.app import create_app
from proxy.settings import Settings
from proxy.telemetry.logs import configure_logging
from proxy.web.middleware.front import Front
from tests.conftest import SimControl
from tests.support.logs import root_logging_kept
from tests.support.servers import ServerProcess

KEY = "sk-very-secret-key-0123456789"
PROMPT = "my confidential prompt about zebras"
GENERATED = re.compile(r"^req_[0-9a-f]{32}$")


def tagged(upstream_id: str, client_id: str, call: int = 1) -> bool:
    """The upstream id of a client's id: `<id>-<8 hex, per request>-<call>`."""
    return re.fullmatch(re.escape(client_id) + rf"-[0-9a-f]{{8}}-{call}", upstream_id) is not None


class LogCapture:
    """The process's real logging set-up (proxy.telemetry.logs), writing into a buffer."""

    def __init__(self, fmt: str) -> None:
        self.buffer = io.StringIO()
        self.fmt = fmt

    def text(self) -> str:
        """What the server wrote: the test's own HTTP client (httpx) logs the URLs it calls."""
        return "\n".join(line for line in self.buffer.getvalue().splitlines()
                         if '"logger":"httpx"' not in line and " httpx [" not in line)

    def records(self) -> list[dict[str, Any]]:
        assert self.fmt == "json"
        return [orjson.loads(line) for line in self.text().splitlines() if line.strip()]

    def access(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r["logger"] == "proxy.access"]


def _capture(fmt: str) -> Iterator[LogCapture]:
    with root_logging_kept():
        capture = LogCapture(fmt)
        configure_logging("debug", fmt, stream=capture.buffer)
        yield capture


@pytest.fixture
def json_logs() -> Iterator[LogCapture]:
    yield from _capture("json")


@pytest.fixture
def text_logs() -> Iterator[LogCapture]:
    yield from _capture("text")


@pytest.fixture
async def keyed(simulator: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings.of(upstreams=(simulator.url,), api_keys=(KEY,)))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy",
                                     headers={"authorization": f"Bearer {KEY}"}) as http:
            yield http


async def test_json_line_per_request_with_id_key_digest_and_replica(
        keyed: httpx.AsyncClient, json_logs: LogCapture, sim: SimControl,
        simulator: ServerProcess) -> None:
    answer = await keyed.post("/v1/responses", headers={"x-request-id": "client-id.42:a_b"},
                              json={"model": "sim-model", "input": PROMPT, "store": False})
    assert answer.status_code == 200
    assert answer.headers["x-request-id"] == "client-id.42:a_b"
    assert tagged(sim.stats()["last_headers"]["x-request-id"], "client-id.42:a_b")
    [line] = [a for a in json_logs.access() if a["request_id"] == "client-id.42:a_b"]
    assert line["method"] == "POST"
    assert line["route"] == "/v1/responses"
    assert line["status"] == 200
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
    assert line["cache"] == "-"
    assert line["replica"] == simulator.url
    assert re.fullmatch(r"k[0-9a-f]{12}", line["key_id"])
    logged = json_logs.text()
    assert KEY not in logged
    assert "zebras" not in logged  # neither the prompt nor the echoed output


async def test_route_template_not_raw_path_and_no_replica_without_upstream(
        keyed: httpx.AsyncClient, json_logs: LogCapture) -> None:
    missing = await keyed.get("/v1/responses/resp_abcdef0123")
    assert missing.status_code == 404
    rid = missing.headers["x-request-id"]
    assert GENERATED.match(rid)
    [line] = [a for a in json_logs.access() if a["request_id"] == rid]
    assert line["route"] == "/v1/responses/{response_id}"
    assert line["status"] == 404
    assert line["replica"] == "-"
    assert "resp_abcdef0123" not in json_logs.text()


async def test_streams_echo_the_id_and_log_when_the_stream_ends(
        keyed: httpx.AsyncClient, text_logs: LogCapture, sim: SimControl,
        simulator: ServerProcess) -> None:
    answer = await keyed.post("/v1/responses", headers={"x-request-id": "stream-7"},
                              json={"model": "sim-model", "input": PROMPT, "stream": True})
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert answer.headers["x-request-id"] == "stream-7"
    assert "response.completed" in answer.text
    assert tagged(sim.stats()["last_headers"]["x-request-id"], "stream-7")
    lines = [ln for ln in text_logs.text().splitlines() if "proxy.access [stream-7]" in ln]
    assert len(lines) == 1
    assert re.search(r"POST /v1/responses 200 \d+\.\dms key=k[0-9a-f]{12} cache=- "
                     rf"replica={re.escape(simulator.url)}$", lines[0])
    assert KEY not in text_logs.text()
    assert "zebras" not in text_logs.text()


@pytest.mark.parametrize("sent", [b"has space", b'quote"d', b"x" * 129, b"semi;colon",
                                  "\u00e9".encode(), b""])
async def test_unsafe_or_long_ids_are_replaced(keyed: httpx.AsyncClient, sent: bytes) -> None:
    answer = await keyed.get("/v1/models", headers={"x-request-id": sent})
    assert answer.status_code == 200
    assert GENERATED.match(answer.headers["x-request-id"])


async def test_errors_before_the_route_carry_the_id_and_no_key(
        simulator: ServerProcess, json_logs: LogCapture) -> None:
    app = create_app(Settings.of(upstreams=(simulator.url,), api_keys=(KEY,), max_body_bytes=64))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            wrong = await http.get("/v1/models", headers={"authorization": "Bearer sk-wrong-one",
                                                          "x-request-id": "auth-1"})
            big = await http.post("/v1/responses", content=b"x" * 500,
                                  headers={"authorization": f"Bearer {KEY}",
                                           "content-type": "application/json"})
    assert wrong.status_code == 401
    assert wrong.headers["x-request-id"] == "auth-1"
    assert wrong.json()["error"]["type"]
    assert big.status_code == 413
    assert GENERATED.match(big.headers["x-request-id"])
    by_id = {a["request_id"]: a for a in json_logs.access()}
    assert by_id["auth-1"]["status"] == 401
    assert by_id["auth-1"]["key_id"] == "-"
    assert by_id[big.headers["x-request-id"]]["status"] == 413
    assert "sk-wrong-one" not in json_logs.text() and KEY not in json_logs.text()


async def test_passthrough_answer_carries_one_id(keyed: httpx.AsyncClient,
                                                 json_logs: LogCapture,
                                                 simulator: ServerProcess) -> None:
    answer = await keyed.post("/v1/chat/completions", headers={"x-request-id": "chat-1"},
                              json={"model": "sim-model",
                                    "messages": [{"role": "user", "content": PROMPT}]})
    assert answer.status_code == 200
    assert answer.headers.get_list("x-request-id") == ["chat-1"]
    [line] = [a for a in json_logs.access() if a["request_id"] == "chat-1"]
    assert line["route"] == "/v1/chat/completions"
    assert line["replica"] == simulator.url
    assert "zebras" not in json_logs.text()


async def test_every_log_line_of_the_request_carries_its_id(
        simulator: ServerProcess, json_logs: LogCapture) -> None:
    """A log line written deep inside the request (here: the unexpected-error path, which
    Starlette's outermost middleware runs after ours has returned) carries the id too."""
    app = create_app(Settings.of(upstreams=(simulator.url,)))

    async def boom(request: Any) -> Any:
        logging.getLogger("proxy.test").info("inside the handler")
        raise RuntimeError("bug")

    app.add_route("/v1/boom", boom, methods=["GET"])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            answer = await http.get("/v1/boom", headers={"x-request-id": "deep-1"})
    assert answer.status_code == 500
    assert answer.headers["x-request-id"] == "deep-1"
    assert answer.json()["error"]["message"]
    mine = [r for r in json_logs.records() if r["request_id"] == "deep-1"]
    assert {r["logger"] for r in mine} >= {"proxy.test", "proxy.web", "proxy.access"}
    [access] = [r for r in mine if r["logger"] == "proxy.access"]
    assert access["status"] == 500


async def test_a_background_job_carries_its_creators_id_upstream(
        keyed: httpx.AsyncClient, sim: SimControl) -> None:
    job = await keyed.post("/v1/responses", headers={"x-request-id": "bg-1"},
                           json={"model": "sim-model", "input": PROMPT, "background": True})
    assert job.status_code == 200
    assert job.headers["x-request-id"] == "bg-1"
    response_id = job.json()["id"]
    status = job.json()["status"]
    for _ in range(200):  # bounded: 200 x 50 ms
        if status not in ("queued", "in_progress"):
            break
        await asyncio.sleep(0.05)
        status = (await keyed.get(f"/v1/responses/{response_id}")).json()["status"]
    assert status == "completed"
    assert tagged(sim.stats()["last_headers"]["x-request-id"], "bg-1")


async def test_upstream_request_id_is_replaced_and_cache_header_logged(
        json_logs: LogCapture) -> None:
    """The middleware alone, around an app that answers like a cache hit relayed from a replica
    that sent its own `x-request-id`: one id leaves (ours), and the cache result is logged."""
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"x-request-id", b"from-upstream"), (b"x-proxy-cache", b"hit"),
                                (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "headers": [(b"x-request-id", b"mine-1")]}
    # In a task of its own, as uvicorn runs a request: the id stays in that task's context.
    await asyncio.create_task(Front(app)(scope, receive, send))
    headers = sent[0]["headers"]
    assert [v for k, v in headers if k == b"x-request-id"] == [b"mine-1"]
    [line] = [a for a in json_logs.access() if a["request_id"] == "mine-1"]
    assert (line["cache"], line["route"], line["status"]) == ("hit", "unmatched", 200)


async def test_each_upstream_call_of_one_request_has_its_own_id_under_the_clients(
        keyed: httpx.AsyncClient, sim: SimControl) -> None:
    """An automatic compaction's summarisation turn and the turn itself: two generations of
    one request, each with its own id (vLLM refuses a second one in flight under one id)."""
    history = [{"role": "user", "content": "a first turn about otters " * 20},
               {"role": "assistant", "content": "an answer about otters " * 20},
               {"role": "user", "content": "next question"}]
    answer = await keyed.post("/v1/responses", headers={"x-request-id": "two-calls"}, json={
        "model": "sim-model", "input": history, "store": False,
        "context_management": [{"type": "compaction", "compact_threshold": 5}]})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-request-id"] == "two-calls"
    ids = sim.stats()["request_ids"]
    assert len(ids) == 2 and len(set(ids)) == 2
    assert all(i.startswith("two-calls-") for i in ids)


async def test_one_client_id_on_two_requests_gives_two_upstream_ids(
        keyed: httpx.AsyncClient, sim: SimControl) -> None:
    """A client that sends one id on concurrent requests: vLLM before late 2025 refuses the
    second one in flight under the same engine id, so each request tags its upstream ids."""
    for _ in range(2):
        answer = await keyed.post("/v1/responses", headers={"x-request-id": "reused"},
                                  json={"model": "sim-model", "input": PROMPT, "store": False})
        assert answer.headers["x-request-id"] == "reused"
    ids = sim.stats()["request_ids"]
    assert len(ids) == 2 and ids[0] != ids[1]
    assert all(tagged(i, "reused") for i in ids)
