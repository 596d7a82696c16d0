"""web_search run by the proxy: `--web-search URL` names a SearXNG-compatible
endpoint (tests/support/searx.py, a fake one on loopback), the simulator calls the search with
the user's question and answers quoting the first result (docs/SIMULATOR.md), real proxy
processes, the official SDK as the client, every streamed event validated (check_stream)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response
from websockets.sync.client import connect

from tests.support import servers
from tests.support.clients import SDK
from tests.support.conformance import check_stream
from tests.support.searx import results_for
from tests.support.servers import ServerProcess, start_proxy, start_searx

pytestmark = pytest.mark.e2e

KEY = "sk-test"
AUTH = {"authorization": f"Bearer {KEY}"}
QUESTION = "What is the tallest mountain on Mars?"


@pytest.fixture(scope="module")
def searx(request: pytest.FixtureRequest) -> ServerProcess:
    """The fake SearXNG (tests/support/searx.py); what it received is at its /queries."""
    server = start_searx()
    request.addfinalizer(server.stop)
    return server


@pytest.fixture(scope="module")
def search_proxy(simulator: ServerProcess, searx: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--web-search", f"{searx.url}/search")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def failing_proxies(simulator: ServerProcess,
                    searx: ServerProcess) -> Iterator[dict[str, ServerProcess]]:
    """Endpoints that answer 500, never answer in time (1 s bound), answer no JSON."""
    started = {path: start_proxy(simulator.url, "--web-search", f"{searx.url}/{path}",
                                 "--web-search-timeout", "1")
               for path in ("fail", "slow", "garbage")}
    yield started
    for server in started.values():
        server.stop()


@pytest.fixture(scope="module")
def pair(simulator: ServerProcess, redis_server: ServerProcess,
         searx: ServerProcess) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two instances on one Redis: A only serves HTTP, B runs the worker (each with its own
    --web-search: a job searches with its worker's configuration)."""
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    flags = ("--web-search", f"{searx.url}/search")
    a = start_proxy(simulator.url, *flags, "--no-worker", redis_url=url)
    b = start_proxy(simulator.url, *flags, "--heartbeat-interval", "0.5", redis_url=url)
    yield a, b
    a.stop()
    b.stop()


def sdk(server: ServerProcess) -> openai.OpenAI:
    return SDK.get(server.url, KEY)


def received(searx: ServerProcess) -> list[str]:
    queries: list[str] = httpx.get(searx.url + "/queries", timeout=5).json()
    return queries


def check_answer(response: Response, searx: ServerProcess, query: str = QUESTION) -> None:
    """One search whose query the endpoint received, then an answer citing its results."""
    assert response.status == "completed", response.error
    assert [item.type for item in response.output] == ["web_search_call", "message"]
    call, message = response.output
    assert call.type == "web_search_call" and call.id.startswith("ws_")
    assert call.status == "completed"
    assert call.action.type == "search"
    assert call.action.query == query
    assert call.action.query == received(searx)[-1]  # exactly what the endpoint was sent
    urls = [r["url"] for r in results_for(query)]
    assert [s.url for s in call.action.sources or ()] == urls
    assert message.type == "message"
    part = message.content[0]
    assert part.type == "output_text"
    # The simulator quoted the first result's first sentence, citing it by number.
    assert results_for(query)[0]["content"].split(". ")[0] in part.text
    citations = [a for a in part.annotations if a.type == "url_citation"]
    assert citations, part
    for citation in citations:
        assert citation.url in urls
        assert citation.title == results_for(query)[urls.index(citation.url)]["title"]
        assert part.text[citation.start_index:citation.end_index] == "[1]"
    assert citations[0].url == urls[0]


# -- the loop ----------------------------------------------------------------------------------
def test_web_search_not_streamed(search_proxy: ServerProcess, searx: ServerProcess) -> None:
    response = sdk(search_proxy).responses.create(model="sim-model", input=QUESTION,
                                                  tools=[{"type": "web_search"}])
    check_answer(response, searx)
    assert response.tools[0].type == "web_search"
    raw = httpx.post(search_proxy.url + "/v1/responses", headers=AUTH, timeout=30, json={
        "model": "sim-model", "input": QUESTION, "tools": [{"type": "web_search_preview"}]})
    assert raw.status_code == 200
    assert "x-proxy-dropped-tools" not in raw.headers
    Response.model_validate(raw.json(), strict=True)


def test_web_search_streamed_every_event_valid(search_proxy: ServerProcess,
                                               searx: ServerProcess) -> None:
    events = [e.to_dict() for e in sdk(search_proxy).responses.create(
        model="sim-model", input=QUESTION, tools=[{"type": "web_search_preview"}],
        stream=True)]
    check_stream(events)
    kinds = [e["type"] for e in events]
    assert kinds.index("response.web_search_call.in_progress") < \
        kinds.index("response.web_search_call.searching") < \
        kinds.index("response.web_search_call.completed") < \
        kinds.index("response.output_text.delta") < \
        kinds.index("response.output_text.annotation.added") < \
        kinds.index("response.output_text.done")
    final = Response.model_validate(events[-1]["response"])
    check_answer(final, searx)
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["type"] == "web_search_call"
    assert added["item"]["action"]["query"] == QUESTION


def test_query_directive_and_forced_tool_choice(search_proxy: ServerProcess,
                                                searx: ServerProcess) -> None:
    """The model's query is what the endpoint gets (here one the user's text sets), and a
    tool_choice that forces the search is honoured, not refused."""
    response = sdk(search_proxy).responses.create(
        model="sim-model", input="tell me query=olympus-mons-height please",
        tools=[{"type": "web_search_preview"}], tool_choice={"type": "web_search_preview"})
    check_answer(response, searx, "olympus-mons-height")
    assert response.tool_choice.type == "web_search_preview"


def test_stored_retrieved_and_replayed(search_proxy: ServerProcess,
                                       searx: ServerProcess) -> None:
    client = sdk(search_proxy)
    made = client.responses.create(model="sim-model", input=QUESTION,
                                   tools=[{"type": "web_search"}])
    got = client.responses.retrieve(made.id)
    assert got.model_dump() == made.model_dump()
    check_answer(got, searx)
    # No event log for a JSON create: the events are rebuilt from the stored object.
    rebuilt = [e.to_dict() for e in client.responses.retrieve(made.id, stream=True)]
    check_stream(rebuilt)
    kinds = [e["type"] for e in rebuilt]
    for kind in ("response.web_search_call.in_progress", "response.web_search_call.searching",
                 "response.web_search_call.completed", "response.output_text.annotation.added"):
        assert kind in kinds, kind
    assert rebuilt[-1]["response"]["output"] == made.model_dump(exclude_unset=True)["output"]
    # A streamed create replays its own log, the same events.
    live = [e.to_dict() for e in client.responses.create(
        model="sim-model", input=QUESTION, tools=[{"type": "web_search"}], stream=True)]
    replayed = [e.to_dict() for e in client.responses.retrieve(
        live[0]["response"]["id"], stream=True)]
    assert replayed == live
    # The chain goes on from it: the next turn has the answer in its history.
    follow = client.responses.create(model="sim-model", input="thanks",
                                     previous_response_id=made.id)
    assert follow.status == "completed" and follow.output_text == "You said: thanks"


def test_stateless_client_sends_the_output_back(search_proxy: ServerProcess,
                                                searx: ServerProcess) -> None:
    """`store: false` clients (Codex) replay the whole output as the next input: the
    web_search_call item is taken back, not refused."""
    client = sdk(search_proxy)
    first = client.responses.create(model="sim-model", input=QUESTION, store=False,
                                    tools=[{"type": "web_search"}])
    check_answer(first, searx)
    history = [{"role": "user", "content": QUESTION},
               *[item.model_dump(exclude_none=True) for item in first.output],
               {"role": "user", "content": "and the second highest?"}]
    second = client.responses.create(model="sim-model", input=history, store=False,
                                     tools=[{"type": "web_search"}])
    assert second.status == "completed"
    assert second.output[0].type == "web_search_call"
    assert second.output[0].action.query == "and the second highest?"


def test_background(search_proxy: ServerProcess, searx: ServerProcess) -> None:
    made = sdk(search_proxy).responses.create(model="sim-model", input=QUESTION,
                                              tools=[{"type": "web_search"}], background=True)
    body = servers.wait_status(search_proxy, made.id, {"completed", "failed"}, 30,
                               headers=AUTH)
    check_answer(Response.model_validate(body), searx)
    events = [e.to_dict() for e in sdk(search_proxy).responses.retrieve(made.id, stream=True)]
    check_stream(events)
    assert "response.web_search_call.searching" in [e["type"] for e in events]


def test_background_on_another_instance_and_replayed_there(
        pair: tuple[ServerProcess, ServerProcess], searx: ServerProcess) -> None:
    a, b = pair
    made = sdk(a).responses.create(model="sim-model", input=QUESTION,
                                   tools=[{"type": "web_search"}], background=True)
    body = servers.wait_status(a, made.id, {"completed", "failed"}, 30, headers=AUTH)
    check_answer(Response.model_validate(body), searx)
    events = [e.to_dict() for e in sdk(a).responses.retrieve(made.id, stream=True)]
    check_stream(events)
    assert events == [e.to_dict() for e in sdk(b).responses.retrieve(made.id, stream=True)]
    assert [e["type"] for e in events].count("response.web_search_call.searching") == 1


def test_websocket_mode(search_proxy: ServerProcess, searx: ServerProcess) -> None:
    url = search_proxy.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers=AUTH, open_timeout=10, close_timeout=5) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "sim-model", "input": QUESTION,
                            "tools": [{"type": "web_search"}]}))
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] not in ("response.completed",
                                                       "response.failed", "error"):
            events.append(json.loads(ws.recv(timeout=20)))
    check_stream(events)
    check_answer(Response.model_validate(events[-1]["response"]), searx)


# -- configuration -----------------------------------------------------------------------------
def test_only_with_web_search_configured(proxy: ServerProcess, search_proxy: ServerProcess,
                                         searx: ServerProcess) -> None:
    """Without --web-search, web_search stays a hosted tool dropped and named, as before;
    with it, it runs."""
    body: dict[str, Any] = {"model": "sim-model", "input": QUESTION,
                            "tools": [{"type": "web_search"}]}
    before = len(received(searx))
    plain = httpx.post(proxy.url + "/v1/responses", headers=AUTH, json=body, timeout=30)
    assert plain.status_code == 200
    assert plain.headers["x-proxy-dropped-tools"] == "web_search"
    assert [i["type"] for i in plain.json()["output"]] == ["message"]
    assert plain.json()["tools"] == []
    assert len(received(searx)) == before  # nothing was searched
    ran = httpx.post(search_proxy.url + "/v1/responses", headers=AUTH, json=body, timeout=30)
    assert [i["type"] for i in ran.json()["output"]] == ["web_search_call", "message"]
    assert len(received(searx)) == before + 1


# -- a search endpoint that fails --------------------------------------------------------------
@pytest.mark.parametrize("path", ["fail", "slow", "garbage"])
def test_failing_endpoint_fails_the_call_not_the_response(
        failing_proxies: dict[str, ServerProcess], path: str) -> None:
    """The call item ends `failed`, the model is told and answers: the response completes,
    within the search's time bound, streamed and not."""
    server = failing_proxies[path]
    started = time.monotonic()
    response = sdk(server).responses.create(model="sim-model", input=QUESTION,
                                            tools=[{"type": "web_search"}])
    assert time.monotonic() - started < 10
    assert response.status == "completed"
    call, message = response.output
    assert call.type == "web_search_call" and call.status == "failed"
    assert call.action.query == QUESTION
    assert "web search failed" in response.output_text
    assert message.content[0].annotations == []
    events = [e.to_dict() for e in sdk(server).responses.create(
        model="sim-model", input=QUESTION, tools=[{"type": "web_search"}], stream=True)]
    check_stream(events)
    assert events[-1]["response"]["output"][0]["status"] == "failed"
