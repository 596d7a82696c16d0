"""Logprobs end to end through the official `openai` SDK: the simulator answers `logprobs:
true` as vLLM does, and the proxy serves `include: ["message.output_text.logprobs"]` and
`top_logprobs` on deltas, `output_text.done`, the stored object, retrieve, the replay (with
`starting_after`) and a background job."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response
from websockets.sync.client import connect

from tests.support.clients import SDK, streamed
from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess, start_proxy, start_simulator

if TYPE_CHECKING:
    from tests.conftest import SimControl

pytestmark = pytest.mark.e2e

INCLUDE = ["message.output_text.logprobs"]


@pytest.fixture
def chat(sim: SimControl) -> openai.OpenAI:
    """The SDK straight at the simulator (closed with the module's other clients)."""
    return SDK.get(sim.url, "x")


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


# -- the simulator, as vLLM ------------------------------------------------------------------
def test_simulator_streams_one_entry_per_token_the_sampled_one_first(
        chat: openai.OpenAI) -> None:
    chunks = list(chat.chat.completions.create(model="sim-model", messages=user("hello there"),
                                               stream=True, logprobs=True, top_logprobs=3))
    text = ""
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk.to_dict(), strict=True)
        if not chunk.choices or not chunk.choices[0].delta.content:
            continue
        choice = chunk.choices[0]
        content = choice.delta.content or ""
        assert choice.logprobs is not None and choice.logprobs.content is not None
        entries = choice.logprobs.content
        assert "".join(e.token for e in entries) == content
        for entry in entries:
            assert entry.bytes == list(entry.token.encode())
            assert len(entry.top_logprobs) == 3
            assert entry.top_logprobs[0].token == entry.token
            assert entry.top_logprobs[0].logprob == entry.logprob
        text += content
    assert text == "You said: hello there"
    again = chat.chat.completions.create(model="sim-model", messages=user("hello there"),
                                         logprobs=True, top_logprobs=3)
    ChatCompletion.model_validate(again.to_dict(), strict=True)
    assert again.choices[0].logprobs is not None
    whole = again.choices[0].logprobs.content or []
    assert "".join(e.token for e in whole) == text
    streamed_values = [c.choices[0].logprobs.content[0].logprob for c in chunks
                       if c.choices and c.choices[0].logprobs and c.choices[0].logprobs.content]
    assert [e.logprob for e in whole] == streamed_values  # deterministic


def test_simulator_attaches_logprobs_to_reasoning_chunks_as_vllm_does(
        chat: openai.OpenAI) -> None:
    chunks = [c.to_dict() for c in chat.chat.completions.create(
        model="sim-reasoner", messages=user("why"), stream=True, logprobs=True)]
    reasoning = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("reasoning")]
    assert reasoning and all(c["choices"][0]["logprobs"]["content"] for c in reasoning)
    assert all(c["choices"][0]["logprobs"]["content"][0]["top_logprobs"] == []
               for c in reasoning)


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"top_logprobs": 2}, "`logprobs` must be set to true"),
    ({"logprobs": True, "top_logprobs": 21}, "greater than max allowed: 20"),
    ({"logprobs": True, "top_logprobs": -2}, "must be a positive value"),
])
def test_simulator_refuses_logprobs_as_vllm_does(chat: openai.OpenAI, extra: dict[str, Any],
                                                 fragment: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        chat.chat.completions.create(model="sim-model", messages=user("x"), **extra)
    assert fragment in str(info.value)


# -- the proxy ---------------------------------------------------------------------------------
def tokens_of(logprobs: list[dict[str, Any]]) -> str:
    return "".join(e["token"] for e in logprobs)


def test_streamed_deltas_and_done_carry_logprobs(openai_client: openai.OpenAI) -> None:
    events = streamed(openai_client, model="sim-reasoner", input="stream me please",
                      include=INCLUDE, top_logprobs=2, reasoning={"effort": "low"})
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all(tokens_of(e["logprobs"]) == e["delta"] for e in deltas)
    assert all(len(e["top_logprobs"]) == 2 for d in deltas for e in d["logprobs"])
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert tokens_of(done["logprobs"]) == done["text"]
    final = events[-1]["response"]
    assert final["top_logprobs"] == 2
    message = next(i for i in final["output"] if i["type"] == "message")
    part = message["content"][0]
    assert tokens_of(part["logprobs"]) == part["text"]
    assert part["logprobs"][0]["bytes"] == list(part["logprobs"][0]["token"].encode())


def test_non_stream_retrieve_and_replay_keep_the_logprobs(openai_client: openai.OpenAI) -> None:
    created = openai_client.responses.create(model="sim-model", input="keep my logprobs",
                                      include=INCLUDE, top_logprobs=1)
    Response.model_validate(created.to_dict(), strict=True)
    part = created.output[0].content[0]  # type: ignore[union-attr]
    assert part.logprobs and "".join(e.token for e in part.logprobs) == created.output_text
    assert all(len(e.top_logprobs) == 1 for e in part.logprobs)
    kept = openai_client.responses.retrieve(created.id)
    assert kept.to_dict()["output"] == created.to_dict()["output"]
    replay = [e.to_dict() for e in openai_client.responses.retrieve(created.id, stream=True)]
    check_stream(replay)
    done = next(e for e in replay if e["type"] == "response.output_text.done")
    assert tokens_of(done["logprobs"]) == created.output_text
    tail = [e.to_dict() for e in openai_client.responses.retrieve(created.id, stream=True,
                                                            starting_after=2)]
    assert tail == replay[3:]


def test_top_logprobs_alone_is_echoed_with_no_logprobs(openai_client: openai.OpenAI) -> None:
    created = openai_client.responses.create(model="sim-model", input="no include", top_logprobs=4,
                                      store=False)
    assert created.top_logprobs == 4
    assert created.output[0].content[0].logprobs == []  # type: ignore[union-attr]


def test_a_background_job_keeps_the_logprobs(openai_client: openai.OpenAI) -> None:
    queued = openai_client.responses.create(model="sim-model", input="in the background",
                                     include=INCLUDE, background=True)
    deadline = time.monotonic() + 20
    final = openai_client.responses.retrieve(queued.id)
    while final.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.05)
        final = openai_client.responses.retrieve(queued.id)
    assert final.status == "completed"
    part = final.output[0].content[0]  # type: ignore[union-attr]
    assert part.logprobs and "".join(e.token for e in part.logprobs) == final.output_text


def test_bad_top_logprobs_is_a_400_naming_it(openai_client: openai.OpenAI) -> None:
    edge = openai_client.responses.create(model="sim-model", input="x", include=INCLUDE,
                                   top_logprobs=20, store=False)
    assert len(edge.output[0].content[0].logprobs[0].top_logprobs) == 20  # type: ignore
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.responses.create(model="sim-model", input="x", include=INCLUDE,
                                       top_logprobs=21)
    assert info.value.param == "top_logprobs"


def test_websocket_mode_carries_the_logprobs(proxy: ServerProcess) -> None:
    url = proxy.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers={"authorization": "Bearer sk-test"},
                 open_timeout=10, close_timeout=5) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "sim-model", "store": False,
                            "input": "over a socket", "include": INCLUDE, "top_logprobs": 1}))
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] not in ("response.completed", "error"):
            events.append(json.loads(ws.recv(timeout=20)))
            assert len(events) < 200
    check_stream(events)
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert done["logprobs"] and tokens_of(done["logprobs"]) == done["text"]


@pytest.fixture(scope="module")
def strict_fleet() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """A 0.32 simulator serving at most 5 alternatives (vLLM's `--max-logprobs 5`), under the
    proxy's own bound (20), and a proxy in front of it."""
    fleet = start_simulator("--vllm-version", "0.32", "--max-logprobs", "5")
    try:
        front = start_proxy(fleet.url)
        yield fleet, front
        front.stop()
    finally:
        fleet.stop()


REAL_STREAMED = Path(__file__).parent.parent / "fixtures" / "vllm" / "e2e-0.32"


def test_the_032_simulator_refuses_the_bound_in_its_stream_as_vllm_does(
        strict_fleet: tuple[ServerProcess, ServerProcess]) -> None:
    capture = REAL_STREAMED / "bad_top_logprobs_stream"
    body = json.loads(capture.with_suffix(".request.json").read_text())
    body["model"] = "sim-model"
    response = httpx.post(strict_fleet[0].url + "/v1/chat/completions", json=body, timeout=30)
    real = capture.with_suffix(".sse").read_text()
    assert response.status_code == 200  # as the capture's headers say
    assert (REAL_STREAMED / "bad_top_logprobs_stream.headers").read_text().startswith(
        "HTTP/1.1 200")
    frames = [f.removeprefix("data: ") for f in response.text.split("\n\n") if f]
    real_frames = [f.removeprefix("data: ") for f in real.split("\n\n") if f]
    assert frames[1:] == real_frames[1:] == ["[DONE]"]
    assert json.loads(frames[0]) == json.loads(real_frames[0])


def test_the_fleets_logprobs_bound_refused_in_its_stream_is_a_400_naming_top_logprobs(
        strict_fleet: tuple[ServerProcess, ServerProcess]) -> None:
    # vLLM 0.32 refuses it after a 200, in the stream's first frame (make e2e-vllm found it):
    # the proxy answered 502 "upstream error: ... (parameter=logprobs, value=8)".
    client = SDK.get(strict_fleet[1].url, "x")
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="sim-model", input="x", include=INCLUDE, top_logprobs=8,
                                store=False)
    assert info.value.param == "top_logprobs"
    assert "(parameter=" not in str(info.value) and "greater than max allowed: 5" in str(
        info.value)
    events = streamed(client, model="sim-model", input="x", include=INCLUDE, top_logprobs=8,
                      store=False)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["message"] == \
        "Requested sample logprobs of 8, which is greater than max allowed: 5"
    assert client.responses.create(model="sim-model", input="x", include=INCLUDE,
                                   top_logprobs=5, store=False).status == "completed"
