"""Compaction (docs/contract.md "Compaction") against real `serve` processes.

Two proxies share one real Redis and one `--fleet-secret` (a compaction made on one opens on the
other); a third runs with another secret (its blobs open nowhere else). The simulator's
`last_request` shows what reached the fleet: the summarisation turn of `/v1/responses/compact`,
and for a continued chain whether the summary, not the original context, went upstream. (The
simulator's summary is its echo `You said: <the summarisation instruction>`.)
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import (
    ResponseCompactionCompactingEvent,
    ResponseCompactionItem,
    ResponseCompletedEvent,
    ResponseOutputItemAddedEvent,
)
from websockets.sync.client import ClientConnection, connect

from proxy.core.compaction import SUMMARY_HEADER, SUMMARY_INSTRUCTION
from proxy.core.seal import VERSION
from tests.conftest import SimControl
from tests.support.clients import SDK
from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess, start_proxy
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e

KEY = "sk-compact-one"
OTHER_KEY = "sk-compact-two"
SECRET = "compaction-fleet-secret"
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
Pair = tuple[ServerProcess, ServerProcess]


@pytest.fixture(scope="module")
def pair(simulator: ServerProcess, redis_server: ServerProcess) -> Iterator[Pair]:
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    flags = ("--api-key", KEY, "--api-key", OTHER_KEY, "--fleet-secret", SECRET)
    a = start_proxy(simulator.url, *flags, redis_url=url)
    b = start_proxy(simulator.url, *flags, redis_url=url)
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(scope="module")
def stranger(simulator: ServerProcess) -> Iterator[ServerProcess]:
    """A proxy of another fleet: same key, another secret, its own (embedded) store."""
    proxy = start_proxy(simulator.url, "--api-key", KEY, "--fleet-secret", "another-fleet")
    yield proxy
    proxy.stop()


def auth(key: str = KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def post(server: ServerProcess, path: str, body: dict[str, Any],
         key: str = KEY) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=auth(key), timeout=60)


def create(server: ServerProcess, **body: Any) -> dict[str, Any]:
    answer = post(server, "/v1/responses", {"model": "sim-model", **body})
    assert answer.status_code == 200, answer.text
    made: dict[str, Any] = answer.json()
    return made


def streamed(server: ServerProcess, **body: Any) -> list[dict[str, Any]]:
    with httpx.stream("POST", server.url + "/v1/responses", headers=auth(), timeout=60,
                      json={"model": "sim-model", "stream": True, **body}) as response:
        assert response.status_code == 200, response.read()
        return data_payloads(b"".join(response.iter_raw()))


def upstream_messages(sim: SimControl) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = sim.stats()["last_request"]["messages"]
    return messages


def text_of(response: dict[str, Any]) -> str:
    message = [i for i in response["output"] if i["type"] == "message"][-1]
    text: str = message["content"][0]["text"]
    return text


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def check_compaction_item(item: dict[str, Any]) -> None:
    ResponseCompactionItem.model_validate(item, strict=True)
    assert item["encrypted_content"].startswith(VERSION)


def check_summary_upstream(messages: list[dict[str, Any]], *, absent: list[str]) -> None:
    """The summary reached the fleet as the system context, and none of `absent` did."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    assert len(system) == 1 and system[0].startswith(SUMMARY_HEADER), system
    assert "Summarise the conversation so far" in system[0]  # the simulator's summary
    sent = json.dumps(messages)
    for text in absent:
        assert text not in sent, text


# -- POST /v1/responses/compact ------------------------------------------------------------------
def test_compact_by_input_with_the_sdk(pair: Pair, sim: SimControl) -> None:
    a, _ = pair
    compacted = SDK.get(a.url, KEY).responses.compact(model="sim-model", input=[
        {"role": "user", "content": "plan the zebra migration"},
        {"role": "assistant", "content": "the zebras go north in spring"},
        {"role": "user", "content": "and the lions?"},
    ])
    assert compacted.object == "response.compaction"
    # User messages are not in the SDK's output-item union (OpenAI sends them all the same):
    # read attributes, as a client does, rather than re-serialise the object.
    assert [i.type for i in compacted.output] == ["message", "message", "compaction"]
    assert [i.content[0].text for i in compacted.output[:2]] == [  # type: ignore[union-attr]
        "plan the zebra migration", "and the lions?"]
    last = compacted.output[-1]
    assert isinstance(last, ResponseCompactionItem)
    check_compaction_item(last.model_dump(exclude_none=True))
    assert compacted.usage.input_tokens > 0 and compacted.usage.output_tokens > 0
    # The summary was written by the fleet: the conversation plus the instruction, not streamed.
    sent = sim.stats()["last_request"]
    assert sent["stream"] is False
    assert sent["messages"][-1] == user(SUMMARY_INSTRUCTION)
    assert sent["messages"][1]["content"] == "the zebras go north in spring"


def test_compact_by_previous_response_id(pair: Pair, sim: SimControl) -> None:
    a, b = pair
    first = create(a, input="remember the kiwi")
    second = create(a, input="and the mango", previous_response_id=first["id"])
    answer = post(b, "/v1/responses/compact",
                  {"model": "sim-model", "previous_response_id": second["id"]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "response.compaction" and body["id"].startswith("resp_")
    assert [i.get("role") for i in body["output"]] == ["user", "user", None]
    assert [i["content"][0]["text"] for i in body["output"][:2]] == [
        "remember the kiwi", "and the mango"]
    check_compaction_item(body["output"][-1])
    assert body["usage"]["total_tokens"] > 0
    summarised = upstream_messages(sim)
    assert [m["role"] for m in summarised] == ["user", "assistant", "user", "assistant", "user"]
    assert summarised[1]["content"] == text_of(first)


def test_a_compacted_context_continues_on_the_other_instance(pair: Pair,
                                                             sim: SimControl) -> None:
    a, b = pair
    compacted = post(a, "/v1/responses/compact", {"model": "sim-model", "input": [
        user("the secret animal is an okapi"),
        {"role": "assistant", "content": "noted: okapi-answer-text"},
    ]}).json()
    # B opens A's blob (one fleet secret): the summary goes upstream instead of the context.
    later = create(b, input=[*compacted["output"], user("what was it?")])
    assert later["status"] == "completed"
    sent = upstream_messages(sim)
    check_summary_upstream(sent, absent=["okapi-answer-text"])
    assert [m["content"] for m in sent if m["role"] == "user"] == [
        "the secret animal is an okapi", "what was it?"]
    # And a chain from that response, again on A, still carries the summary.
    create(a, input="one more", previous_response_id=later["id"])
    sent = upstream_messages(sim)
    check_summary_upstream(sent, absent=["okapi-answer-text"])
    assert sent[-1] == user("one more")


def test_a_forged_or_altered_compaction_blob_is_refused(pair: Pair,
                                                        stranger: ServerProcess) -> None:
    a, _ = pair
    genuine = post(a, "/v1/responses/compact",
                   {"model": "sim-model", "input": "a fact to keep"}).json()["output"][-1]
    raw = bytearray(base64.urlsafe_b64decode(genuine["encrypted_content"][len(VERSION):]))
    raw[-1] ^= 0x01
    altered = VERSION + base64.urlsafe_b64encode(bytes(raw)).decode()
    forged = VERSION + base64.urlsafe_b64encode(b"\0" * 32 + b"my own summary").decode()
    for blob in (altered, forged, "plain text pretending"):
        answer = post(a, "/v1/responses", {"model": "sim-model", "input": [
            user("hi"), {"type": "compaction", "encrypted_content": blob}]})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["param"] == "input[1].encrypted_content"
        assert error["code"] == "invalid_encrypted_content"
    # The genuine one opens in its fleet and nowhere else.
    assert post(a, "/v1/responses", {"model": "sim-model", "input": [genuine]}).status_code \
        == 200
    elsewhere = post(stranger, "/v1/responses", {"model": "sim-model", "input": [genuine]})
    assert elsewhere.status_code == 400
    assert elsewhere.json()["error"]["param"] == "input[0].encrypted_content"


def test_compact_without_a_model_is_a_400_naming_it(pair: Pair) -> None:
    a, _ = pair
    answer = post(a, "/v1/responses/compact", {"input": "hi"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "model" and "model" in error["message"]
    assert error["type"] == "invalid_request_error"
    nothing = post(a, "/v1/responses/compact", {"model": "sim-model"})
    assert nothing.status_code == 400 and nothing.json()["error"]["param"] == "input"
    unknown = post(a, "/v1/responses/compact", {"model": "no-such-model", "input": "hi"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    lenient = post(a, "/v1/responses/compact", {"model": "sim-model", "input": "hi",
                                                "surprise": True})
    assert lenient.status_code == 200
    assert lenient.headers["x-proxy-ignored-params"] == "surprise"
    with pytest.raises(openai.BadRequestError):
        SDK.get(a.url, KEY).responses.compact(model=None, input="hi")  # type: ignore[arg-type]


def test_another_key_cannot_compact_from_my_previous_response(pair: Pair) -> None:
    a, b = pair
    mine = create(a, input="private context")
    answer = post(b, "/v1/responses/compact",
                  {"model": "sim-model", "previous_response_id": mine["id"]}, key=OTHER_KEY)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "previous_response_not_found"
    assert error["param"] == "previous_response_id"
    unauthenticated = httpx.post(a.url + "/v1/responses/compact", timeout=10,
                                 json={"model": "sim-model", "input": "hi"})
    assert unauthenticated.status_code == 401


# -- context_management: automatic compaction ----------------------------------------------------
def test_automatic_compaction_past_the_threshold_streams_the_item(pair: Pair,
                                                                  sim: SimControl) -> None:
    a, b = pair
    first = create(a, input="the first turn talks about giraffes at length")
    events = streamed(a, input="now the second turn", previous_response_id=first["id"],
                      context_management=[{"type": "compaction", "compact_threshold": 10}])
    check_stream(events)  # every event through the SDK's types, strictly
    kinds = [e["type"] for e in events]
    assert kinds[:5] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.compaction.compacting",
                         "response.output_item.done"]
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed"
    assert [i["type"] for i in final["output"]] == ["compaction", "message"]
    check_compaction_item(final["output"][0])
    # The reduced context went upstream: the summary and the user turns, not the old answer.
    sent = upstream_messages(sim)
    check_summary_upstream(sent, absent=[text_of(first)])
    assert [m["content"] for m in sent if m["role"] == "user"] == [
        "the first turn talks about giraffes at length", "now the second turn"]
    # Stored with its output: a chain continued on B uses the summary, not the original.
    retrieved = httpx.get(b.url + f"/v1/responses/{final['id']}", headers=auth(), timeout=10)
    assert retrieved.json()["output"][0] == final["output"][0]
    create(b, input="third turn", previous_response_id=final["id"])
    sent = upstream_messages(sim)
    check_summary_upstream(sent, absent=[text_of(first)])
    assert [m["role"] for m in sent] == ["system", "user", "user", "assistant", "user"]
    assert sent[3]["content"] == text_of(final)


def test_a_stateless_client_resending_its_history_is_compacted(pair: Pair,
                                                               sim: SimControl) -> None:
    a, b = pair
    history = [user("stateless turn about otters"),
               {"role": "assistant", "content": "otter-answer-text"}, user("next question")]
    made = create(a, input=history, store=False,
                  context_management=[{"type": "compaction", "compact_threshold": 5}])
    assert [i["type"] for i in made["output"]] == ["compaction", "message"]
    check_summary_upstream(upstream_messages(sim), absent=["otter-answer-text"])
    # The client keeps its items and appends the output, as store: false clients do; B opens
    # the item and keeps the turn it answered (the item counts the items before it it keeps).
    create(b, store=False, input=[*history, *made["output"], user("last question")])
    sent = upstream_messages(sim)
    check_summary_upstream(sent, absent=["otter-answer-text"])
    assert [m["role"] for m in sent] == ["system", "user", "user", "assistant", "user"]
    assert [m["content"] for m in sent if m["role"] == "user"] == [
        "stateless turn about otters", "next question", "last question"]


def test_the_sdk_streams_an_automatic_compaction(pair: Pair) -> None:
    a, _ = pair
    client = SDK.get(a.url, KEY)
    first = client.responses.create(model="sim-model", input="a first turn for the sdk")
    with client.responses.create(model="sim-model", input="the sdk's second turn",
                                 previous_response_id=first.id, stream=True,
                                 context_management=[{"type": "compaction",
                                                      "compact_threshold": 5}]) as stream:
        events = list(stream)
    assert isinstance(events[3], ResponseCompactionCompactingEvent)
    assert isinstance(events[2], ResponseOutputItemAddedEvent)
    assert isinstance(events[2].item, ResponseCompactionItem)
    final = events[-1]
    assert isinstance(final, ResponseCompletedEvent)
    assert [i.type for i in final.response.output] == ["compaction", "message"]


def test_below_the_threshold_nothing_is_compacted(pair: Pair, sim: SimControl) -> None:
    a, _ = pair
    first = create(a, input="short")
    later = create(a, input="still short", previous_response_id=first["id"],
                   context_management=[{"type": "compaction", "compact_threshold": 100000}])
    assert [i["type"] for i in later["output"]] == ["message"]
    stats = sim.stats()
    assert stats["by_path"].get("/tokenize") == 1  # measured, and found small enough
    assert [m["role"] for m in stats["last_request"]["messages"]] == [
        "user", "assistant", "user"]


def test_a_compaction_trigger_compacts_now(pair: Pair, sim: SimControl) -> None:
    a, _ = pair
    first = create(a, input="a turn worth summarising")
    later = create(a, previous_response_id=first["id"],
                   input=[user("go on"), {"type": "compaction_trigger"}])
    assert [i["type"] for i in later["output"]] == ["compaction", "message"]
    check_summary_upstream(upstream_messages(sim), absent=[text_of(first)])
    misplaced = post(a, "/v1/responses", {"model": "sim-model", "input": [
        {"type": "compaction_trigger"}, user("go on")]})
    assert misplaced.status_code == 400
    assert misplaced.json()["error"]["param"] == "input[0]"
    trigger = {"type": "compaction_trigger"}
    background = post(a, "/v1/responses", {"model": "sim-model", "background": True,
                                           "input": [user("go on"), trigger]})
    assert background.status_code == 400
    assert background.json()["error"]["param"] == "input[1]"


# -- over the WebSocket --------------------------------------------------------------------------
def socket(server: ServerProcess) -> ClientConnection:
    url = server.url.replace("http://", "ws://") + "/v1/responses"
    return connect(url, additional_headers=auth(), open_timeout=10, close_timeout=5)


def ws_create(ws: ClientConnection, **body: Any) -> list[dict[str, Any]]:
    ws.send(json.dumps({"type": "response.create", "model": "sim-model", **body}))
    events: list[dict[str, Any]] = []
    for _ in range(2000):
        event: dict[str, Any] = json.loads(ws.recv(timeout=30))
        events.append(event)
        if event["type"] in TERMINAL or event["type"] == "error":
            return events
    raise AssertionError("no terminal event")


def test_a_compacted_chain_continues_on_the_socket(pair: Pair, sim: SimControl) -> None:
    a, b = pair
    with socket(a) as ws:
        first = ws_create(ws, input="socket turn about penguins", store=False)
        first_text = text_of(first[-1]["response"])
        second = ws_create(ws, input="socket turn two", store=False,
                           previous_response_id=first[-1]["response"]["id"],
                           context_management=[{"type": "compaction", "compact_threshold": 5}])
        check_stream(second)
        assert [i["type"] for i in second[-1]["response"]["output"]] == ["compaction",
                                                                          "message"]
        third = ws_create(ws, input="socket turn three", store=False,
                          previous_response_id=second[-1]["response"]["id"])
        check_stream(third)
    sent = upstream_messages(sim)
    check_summary_upstream(sent, absent=[first_text])
    assert sent[-1] == user("socket turn three")
    # Compacted over HTTP on A, continued on a socket of B.
    compacted = post(a, "/v1/responses/compact", {"model": "sim-model", "input": [
        user("http turn about walruses"), {"role": "assistant", "content": "walrus-answer"}]})
    with socket(b) as ws:
        events = ws_create(ws, input=[*compacted.json()["output"], user("on the socket")])
        check_stream(events)
        follow = ws_create(ws, input="and again", previous_response_id=events[-1]["response"]["id"])
        check_stream(follow)
    check_summary_upstream(upstream_messages(sim), absent=["walrus-answer"])
