"""OpenTelemetry traces from a real `serve` process to a real OTLP/HTTP receiver
(tests/support/otlp.py): a span per request, a child span per upstream call with the GenAI
attributes, the client's `traceparent` continued and the upstream call's sent to the replica
(the simulator's `last_headers`), no prompt text and no key in any attribute; and a collector that
never answers slows no request."""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.servers import (
    ServerProcess,
    start_mcp_server,
    start_proxy,
    start_redis,
    start_searx,
)

KEY = "sk-e2e-trace-key-0123456789"
PROMPT = "the heron counts copper spoons"
INTERNAL, SERVER, CLIENT, CONSUMER = 1, 2, 3, 5  # OTLP's SpanKind numbers
# Export often, so a test waits a fraction of a second, not the SDK's default 5 s.
ENV = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_SERVICE_NAME": "proxy-under-test"}


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def traced_proxy(simulator: ServerProcess, receiver: OtlpReceiver) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--otlp-endpoint", receiver.url, "--api-key", KEY,
                         "--mcp-allow", "http://127.0.0.1", env=ENV)
    yield server
    server.stop()


def _in_trace(trace_id: str) -> object:
    def enough(spans: list[ReceivedSpan]) -> bool:
        mine = [s for s in spans if s.trace_id == trace_id]
        return (any(s.kind == SERVER for s in mine) and any(s.kind == CLIENT for s in mine)
                and any(s.kind == INTERNAL for s in mine))
    return enough


@pytest.mark.parametrize("stream", [True, False])
def test_a_create_is_one_trace_continued_from_the_client_and_into_the_replica(
        traced_proxy: ServerProcess, simulator: ServerProcess, receiver: OtlpReceiver,
        stream: bool) -> None:
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    headers = {"authorization": f"Bearer {KEY}", "traceparent": f"00-{trace_id}-{parent_id}-01",
               "tracestate": "congo=t61rcWkgMzE"}
    answer = httpx.post(traced_proxy.url + "/v1/responses", headers=headers, timeout=30,
                        json={"model": "sim-model", "input": PROMPT, "stream": stream})
    assert answer.status_code == 200
    response_id = (answer.json()["id"] if not stream else
                   answer.text.split('"id":"', 1)[1].split('"', 1)[0])
    sent = httpx.get(simulator.url + "/sim/stats", timeout=5).json()["last_headers"]
    spans = [s for s in receiver.wait_for(_in_trace(trace_id)) if s.trace_id == trace_id]

    [server] = [s for s in spans if s.kind == SERVER]
    assert server.parent_id == parent_id  # the client's span: the trace is continued
    assert server.name == "POST /v1/responses"
    assert server.attributes["http.route"] == "/v1/responses"
    assert server.attributes["http.request.method"] == "POST"
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["proxy.key_id"] not in ("", "-")
    assert server.service == "proxy-under-test"  # OTEL_SERVICE_NAME

    [upstream] = [s for s in spans if s.kind == CLIENT]
    assert upstream.parent_id == server.span_id
    assert upstream.name == "chat sim-model"
    attrs = upstream.attributes
    assert attrs["gen_ai.request.model"] == "sim-model"
    assert attrs["gen_ai.usage.input_tokens"] > 0
    assert attrs["gen_ai.usage.output_tokens"] > 0
    assert attrs["gen_ai.response.id"] == response_id
    assert attrs["gen_ai.server.time_to_first_token"] >= 0
    assert (attrs["server.address"], attrs["server.port"]) == ("127.0.0.1", simulator.port)
    assert attrs["proxy.replica"] == "replica-1"  # its name (the fleet's, GET /fleet)

    # The request's store write: the response's end (it is stored by default).
    [store] = [s for s in spans if s.name == "store finish_response"]
    assert store.parent_id == server.span_id and store.kind == INTERNAL

    # The replica got the upstream call's span as its parent: vLLM's spans join this trace.
    assert sent["traceparent"] == f"00-{trace_id}-{upstream.span_id}-01"
    assert sent["tracestate"] == "congo=t61rcWkgMzE"  # the client's, passed on with ours

    values = " ".join(str(v) for s in receiver.spans for v in s.attributes.values())
    assert "heron" not in values and "copper" not in values
    assert KEY not in values and KEY[3:] not in values


def test_a_request_without_traceparent_starts_its_own_trace(
        traced_proxy: ServerProcess, simulator: ServerProcess, receiver: OtlpReceiver) -> None:
    answer = httpx.post(traced_proxy.url + "/v1/responses", timeout=30,
                        headers={"authorization": f"Bearer {KEY}"},
                        json={"model": "sim-model", "input": "hello there"})
    assert answer.status_code == 200
    sent = httpx.get(simulator.url + "/sim/stats", timeout=5).json()["last_headers"]
    _, trace_id, span_id, _ = sent["traceparent"].split("-")
    spans = [s for s in receiver.wait_for(_in_trace(trace_id)) if s.trace_id == trace_id]
    [server] = [s for s in spans if s.kind == SERVER]
    [upstream] = [s for s in spans if s.kind == CLIENT]
    assert server.parent_id == "" and upstream.parent_id == server.span_id
    assert upstream.span_id == span_id


def test_a_background_job_joins_the_trace_of_the_request_that_queued_it(
        traced_proxy: ServerProcess, receiver: OtlpReceiver) -> None:
    trace_id = secrets.token_hex(16)
    answer = httpx.post(traced_proxy.url + "/v1/responses", timeout=30, json={
        "model": "sim-model", "input": "a job for later", "background": True},
        headers={"authorization": f"Bearer {KEY}",
                 "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"})
    assert answer.status_code == 200

    def ran(spans: list[ReceivedSpan]) -> bool:
        mine = [s for s in spans if s.trace_id == trace_id]
        return any(s.kind == CONSUMER for s in mine) and any(s.kind == CLIENT for s in mine)
    spans = [s for s in receiver.wait_for(ran) if s.trace_id == trace_id]
    [server] = [s for s in spans if s.kind == SERVER]
    [job] = [s for s in spans if s.kind == CONSUMER]
    [upstream] = [s for s in spans if s.kind == CLIENT]
    assert job.name == "job sim-model"
    assert job.parent_id == server.span_id  # across the queue, through the job's spec
    assert job.attributes["gen_ai.response.id"] == answer.json()["id"]
    assert upstream.parent_id == job.span_id


def test_an_mcp_call_is_a_tool_span_between_the_two_upstream_turns(
        traced_proxy: ServerProcess, receiver: OtlpReceiver) -> None:
    tools_server = start_mcp_server()  # tests/support/mcp_server.py: `add` among its tools
    try:
        _check_mcp_trace(traced_proxy, tools_server, receiver)
    finally:
        tools_server.stop()


def _check_mcp_trace(traced_proxy: ServerProcess, tools_server: ServerProcess,
                     receiver: OtlpReceiver) -> None:
    trace_id = secrets.token_hex(16)
    tool = {"type": "mcp", "server_label": "calc", "server_url": f"{tools_server.url}/mcp",
            "require_approval": "never"}
    answer = httpx.post(traced_proxy.url + "/v1/responses", timeout=60, json={
        "model": "sim-model", "tools": [tool],
        "input": 'please add [[sim call=add call_args={"a":20,"b":22}]]'},
        headers={"authorization": f"Bearer {KEY}",
                 "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"})
    assert answer.status_code == 200
    assert [i["type"] for i in answer.json()["output"]] == ["mcp_list_tools", "mcp_call",
                                                            "message"]

    def whole(spans: list[ReceivedSpan]) -> bool:
        mine = [s for s in spans if s.trace_id == trace_id]
        return (sum(s.kind == CLIENT for s in mine) >= 2
                and any(s.name.startswith("execute_tool") for s in mine)
                and any(s.kind == SERVER for s in mine))
    spans = [s for s in receiver.wait_for(whole) if s.trace_id == trace_id]
    [server] = [s for s in spans if s.kind == SERVER]
    [tool_span] = [s for s in spans if s.name.startswith("execute_tool")]
    assert tool_span.kind == INTERNAL
    calls = [s for s in spans if s.kind == CLIENT]
    assert len(calls) == 2  # the turn that called the tool, the turn that answered
    assert tool_span.name == "execute_tool add"
    assert tool_span.parent_id == server.span_id
    assert all(c.parent_id == server.span_id for c in calls)
    assert tool_span.attributes["gen_ai.tool.name"] == "add"
    assert tool_span.attributes["proxy.mcp.server"] == "calc"
    assert "error.type" not in tool_span.attributes
    values = " ".join(str(v) for s in spans for v in s.attributes.values())
    assert '{"a"' not in values and tools_server.url not in values


def test_a_hosted_web_search_is_a_tool_span(simulator: ServerProcess,
                                            receiver: OtlpReceiver) -> None:
    searx = start_searx()
    proxy = start_proxy(simulator.url, "--web-search", f"{searx.url}/search",
                        "--otlp-endpoint", receiver.url, env=ENV)
    try:
        trace_id = secrets.token_hex(16)
        answer = httpx.post(proxy.url + "/v1/responses", timeout=60, json={
            "model": "sim-model", "input": "What is the tallest mountain on Mars?",
            "tools": [{"type": "web_search"}]},
            headers={"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"})
        assert answer.status_code == 200
        assert answer.json()["output"][0]["type"] == "web_search_call"
        # The tool span ends before the request's own span: wait for both, or the batch that
        # carried the tool span may be all there is yet.
        def whole(got: list[ReceivedSpan]) -> bool:
            mine = [s for s in got if s.trace_id == trace_id]
            return (any(s.name.startswith("execute_tool") for s in mine)
                    and any(s.kind == SERVER for s in mine))
        spans = [s for s in receiver.wait_for(whole) if s.trace_id == trace_id]
    finally:
        proxy.stop()
        searx.stop()
    [server] = [s for s in spans if s.kind == SERVER]
    [tool_span] = [s for s in spans if s.name.startswith("execute_tool")]
    assert tool_span.parent_id == server.span_id
    assert tool_span.attributes["gen_ai.tool.type"] == "hosted"
    assert "error.type" not in tool_span.attributes
    values = " ".join(str(v) for s in spans for v in s.attributes.values())
    assert "Mars" not in values and "mountain" not in values


def test_a_collector_that_never_answers_slows_no_request(simulator: ServerProcess) -> None:
    # Accepts connections (the kernel's backlog) and never reads or answers: the worst case
    # for an exporter, worse than a refused connection.
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)
        port = hole.getsockname()[1]
        # Each export gives up after 1 s (the standard variable; ours is 5 s): the bound on the
        # shutdown's last export below is what is checked, not the default's length.
        proxy = start_proxy(simulator.url, "--otlp-endpoint", f"http://127.0.0.1:{port}",
                            env={**ENV, "OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
        try:
            started = time.monotonic()
            for n in range(20):
                answer = httpx.post(proxy.url + "/v1/responses", timeout=10,
                                    json={"model": "sim-model", "input": f"ping {n}",
                                          "stream": n % 2 == 0})
                assert answer.status_code == 200
                assert "completed" in answer.text
            assert time.monotonic() - started < 5.0
        finally:
            stop_started = time.monotonic()
            proxy.stop()
        # The last export is waited for at shutdown, but bounded.
        assert time.monotonic() - stop_started < 15.0


def test_a_stored_stream_traces_its_create_and_final_writes(
        traced_proxy: ServerProcess, receiver: OtlpReceiver) -> None:
    trace_id = secrets.token_hex(16)
    answer = httpx.post(traced_proxy.url + "/v1/responses", timeout=30, json={
        "model": "sim-model", "stream": True,
        "input": PROMPT + " [[sim tokens=40 delay_ms=10]]"},
        headers={"authorization": f"Bearer {KEY}",
                 "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"})
    assert answer.status_code == 200 and "response.completed" in answer.text

    def written(spans: list[ReceivedSpan]) -> bool:
        names = {s.name for s in spans if s.trace_id == trace_id}
        return {"store create_response", "store finish_response"} <= names
    mine = [s for s in receiver.wait_for(written) if s.trace_id == trace_id]
    [server] = [s for s in mine if s.kind == SERVER]
    [create] = [s for s in mine if s.name == "store create_response"]
    [final] = [s for s in mine if s.name == "store finish_response"]
    for write, operation in ((create, "create_response"), (final, "finish_response")):
        assert write.parent_id == server.span_id and write.kind == INTERNAL
        assert write.attributes == {"db.system": "redis", "db.operation.name": operation}
    # The ~40 event-log flushes of this stream are not spans of its trace (nor per token).
    assert len(mine) == 4  # the request, its upstream call, its two writes
    values = " ".join(str(v) for s in mine for v in s.attributes.values())
    assert "heron" not in values


def test_a_slow_event_log_flush_is_a_span_of_its_own(
        simulator: ServerProcess, receiver: OtlpReceiver) -> None:
    store = start_redis()
    proxy = start_proxy(simulator.url, "--otlp-endpoint", receiver.url, env=ENV,
                        redis_url=f"redis://127.0.0.1:{store.port}/0")
    admin = redis.Redis(host="127.0.0.1", port=store.port)
    trace_id = secrets.token_hex(16)
    try:
        with httpx.stream("POST", proxy.url + "/v1/responses", timeout=30, json={
                "model": "sim-model", "stream": True,
                "input": PROMPT + " [[sim tokens=150 delay_ms=10]]"},
                headers={"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}) as answer:
            lines = answer.iter_lines()
            for line in lines:
                if "output_text.delta" in line:
                    # Redis holds every write for 2 s: the stream's first flush comes within
                    # it (its events are held at most ~1 s, writer.py `HOLD_WINDOWS`, and it
                    # streams for 1.5 s), and waits that long.
                    admin.execute_command("CLIENT", "PAUSE", "2000", "WRITE")
                    break
            text = "\n".join(lines)
        assert "response.completed" in text
        spans = receiver.wait_for(lambda got: any(
            s.name == "store append_events" for s in got) and any(
            s.trace_id == trace_id and s.name == "store finish_response" for s in got))
    finally:
        admin.close()
        proxy.stop()
        store.stop()
    flushes = [s for s in spans if s.name == "store append_events"]
    assert flushes, [s.name for s in spans if s.trace_id == trace_id]
    # A flush carries every live stream's events: a root span in a trace of its own.
    assert all(s.parent_id == "" and s.trace_id != trace_id for s in flushes)
    flush = flushes[0]
    assert flush.attributes["db.system"] == "redis"
    assert flush.attributes["db.operation.name"] == "append_events"
    assert flush.attributes["proxy.eventlog.streams"] == 1
    assert 0 < flush.attributes["proxy.eventlog.events"] < 150
    assert "error.type" not in flush.attributes


def test_uploads_vector_store_writes_and_ingestion_are_traced(
        simulator: ServerProcess, receiver: OtlpReceiver) -> None:
    proxy = start_proxy(simulator.url, "--otlp-endpoint", receiver.url, "--api-key", KEY,
                        "--embedding-model", "sim-model", env=ENV)
    try:
        upload_trace, create_trace = secrets.token_hex(16), secrets.token_hex(16)

        def headers(trace_id: str) -> dict[str, str]:
            return {"authorization": f"Bearer {KEY}",
                    "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
        uploaded = httpx.post(proxy.url + "/v1/files", headers=headers(upload_trace),
                              timeout=30, data={"purpose": "assistants"},
                              files={"file": ("notes.txt", (PROMPT + ". ") * 30, "text/plain")})
        assert uploaded.status_code == 200, uploaded.text
        created = httpx.post(proxy.url + "/v1/vector_stores", headers=headers(create_trace),
                             timeout=30, json={"name": "notes",
                                               "file_ids": [uploaded.json()["id"]]})
        assert created.status_code == 200, created.text

        def ingested(spans: list[ReceivedSpan]) -> bool:
            return any(s.trace_id == create_trace and s.name == "store finish_vector_store_file"
                       for s in spans) and any(s.trace_id == upload_trace and s.kind == SERVER
                                               for s in spans)
        spans = receiver.wait_for(ingested, timeout=20)
    finally:
        proxy.stop()
    upload = [s for s in spans if s.trace_id == upload_trace]
    [server] = [s for s in upload if s.kind == SERVER]
    [put] = [s for s in upload if s.name == "store put_file"]
    assert put.parent_id == server.span_id and put.attributes["db.system"] == "redis"

    made = [s for s in spans if s.trace_id == create_trace]
    [server] = [s for s in made if s.kind == SERVER]
    by_name = {s.name: s for s in made}
    for name in ("store create_vector_store", "store add_vector_store_files"):
        assert by_name[name].parent_id == server.span_id
        assert by_name[name].attributes["db.system"] == "redis"
    # The worker's ingestion: a child of the request that added the file, across the queue;
    # its embedding call and its final write are its children.
    [job] = [s for s in made if s.kind == CONSUMER]
    assert job.name == "ingest vector_store_file" and job.parent_id == server.span_id
    assert by_name["store finish_vector_store_file"].parent_id == job.span_id
    assert any(s.kind == CLIENT and s.parent_id == job.span_id for s in made)
    values = " ".join(str(v) for s in spans for v in s.attributes.values())
    assert "heron" not in values and KEY not in values


@pytest.mark.parametrize("mode", ["stream", "stream_with_usage", "json"])
def test_a_chat_passed_through_has_its_tokens_on_the_upstream_span(
        traced_proxy: ServerProcess, receiver: OtlpReceiver, mode: str) -> None:
    trace_id = secrets.token_hex(16)
    body: dict[str, object] = {"model": "sim-model", "stream": mode != "json",
                               "messages": [{"role": "user", "content": PROMPT}]}
    if mode == "stream_with_usage":
        body["stream_options"] = {"include_usage": True}
    answer = httpx.post(traced_proxy.url + "/v1/chat/completions", timeout=30, json=body,
                        headers={"authorization": f"Bearer {KEY}",
                                 "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"})
    assert answer.status_code == 200
    # The usage chunk asked for on the span's behalf is taken out again: the client gets
    # what it asked for.
    if mode == "stream":
        assert '"choices":[]' not in answer.text and "[DONE]" in answer.text
    if mode == "stream_with_usage":
        assert '"choices":[]' in answer.text

    def ended(spans: list[ReceivedSpan]) -> bool:
        return any(s.trace_id == trace_id and s.kind == CLIENT for s in spans) and any(
            s.trace_id == trace_id and s.kind == SERVER for s in spans)
    spans = [s for s in receiver.wait_for(ended) if s.trace_id == trace_id]
    [server] = [s for s in spans if s.kind == SERVER]
    [upstream] = [s for s in spans if s.kind == CLIENT]
    assert upstream.parent_id == server.span_id and upstream.name == "chat sim-model"
    assert upstream.attributes["gen_ai.usage.input_tokens"] > 0
    assert upstream.attributes["gen_ai.usage.output_tokens"] > 0
    values = " ".join(str(v) for s in spans for v in s.attributes.values())
    assert "heron" not in values
