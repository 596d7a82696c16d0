"""The simulator's vLLM 0.32 shapes against a real vLLM 0.32.0 (tests/fixtures/vllm/real-0.32/):
each captured chat request replayed against the simulator (`--vllm-version 0.32`; the
llama3_json captures with `--persona llama3`), its answer compared with the capture key for key.

What is compared: the HTTP status; an error body whole (message, type, param, code); a stream's
chunks as shapes (top-level keys in order, the choice's keys in order, the delta's keys with
null/empty markers, tool-call heads and fragments, finish and stop reasons, usage keys),
consecutive repeats collapsed (token boundaries are the model's); a completion object's keys
recursively. What is not: model text, token counts, ids' random parts (their form is checked).

What the model chose to write is steered, not compared: the 0.5B model answered some tool
requests in text (the hermes captures) or called a tool where the simulator would not; STEER
adds the directive (or max_tokens) that makes the simulator write the same kind of answer.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.simulator.app import create_app
from proxy.simulator.config import SimConfig
from tests.support.sse import data_payloads

REAL = Path(__file__).parent.parent / "fixtures" / "vllm" / "real-0.32"
MODEL = "qwen2.5-coder-0.5b"
CALL_ID = re.compile(r"^chatcmpl-tool-[0-9a-f]{16}$")
FINGERPRINT = re.compile(r"^vllm-0\.32\.0-[0-9a-f]{8}$")

# capture -> (words added to the last user message, request fields replaced)
STEER: dict[str, tuple[str, dict[str, Any]]] = {
    # the hermes captures: the model wrote its "call" as JSON text, which hermes leaves as text
    "tools_auto": ("[[sim tools=0]]", {}),
    "tools_auto_cut": ("[[sim tools=0 tokens=40]]", {}),
    "tools_auto_parallel": ("[[sim tools=0]]", {}),
    "tools_auto_text": ("[[sim tools=0]]", {}),
    "tools_auto_nonstream": ("[[sim tools=0]]", {}),
    "tools_followup": ("[[sim tokens=60]]", {}),  # a long answer to the tool's result
    "logprobs": ("[[sim tokens=10]]", {}),  # cut at max_tokens 6
    "logprobs_nonstream": ("[[sim tokens=10]]", {}),
    "llama3_json/logprobs": ("[[sim tokens=10]]", {}),
    "llama3_json/logprobs_nonstream": ("[[sim tokens=10]]", {}),
    # llama3_json: the model called the tool where the simulator would answer in text, and
    # spent 12 tokens before its first argument fragment (the simulator one per fragment)
    "llama3_json/tools_auto_text": ("[[sim tools=1]]", {}),
    "llama3_json/tools_auto_parallel": ("[[sim tools=0]]", {}),  # it wrote text here
    "llama3_json/tools_auto_cut": ("", {"max_tokens": 2}),
}
# Captures the simulator cannot replay, and why.
SKIPPED = {
    # after the tool's result the model called the tool again and was cut; the simulator
    # always answers a tool result in text (docs/SIMULATOR.md "Tools", rule 1)
    "llama3_json/tools_followup",
}


def captures() -> list[str]:
    names = []
    for request in sorted(REAL.rglob("*.request.json")):
        name = request.relative_to(REAL).as_posix().removesuffix(".request.json")
        if Path(name).name.startswith("tokenize_") or name in SKIPPED:
            continue
        names.append(name)
    return names


def replay(name: str) -> tuple[int, bytes]:
    body = orjson.loads((REAL / f"{name}.request.json").read_bytes())
    words, fields = STEER.get(name, ("", {}))
    if words:
        last = next(m for m in reversed(body["messages"]) if m["role"] == "user")
        last["content"] = f"{last['content']} {words}"
    body.update(fields)
    config = SimConfig(models=(MODEL,), max_model_len=4096, vllm_version="0.32",
                       persona="llama3" if name.startswith("llama3_json/") else None)

    async def post() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(config))
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as http:
            return await http.post("/v1/chat/completions", content=orjson.dumps(body))

    answer = asyncio.run(post())
    return answer.status_code, answer.content


def captured(name: str) -> tuple[int, bytes]:
    status = int((REAL / f"{name}.headers").read_text().split()[1])
    path = REAL / f"{name}.sse"
    return status, (path if path.exists() else REAL / f"{name}.json").read_bytes()


def _value(value: Any) -> str:
    return "null" if value is None else "empty" if value == "" else type(value).__name__


def _call(call: dict[str, Any]) -> tuple[Any, ...]:
    function = call.get("function") or {}
    return (tuple(call), tuple(function),
            _value(function["arguments"]) if "arguments" in function else None)


def shape(chunk: Any) -> Any:
    """A chunk's shape: what vLLM's code decides, not what the model wrote."""
    if chunk == "[DONE]" or "error" in chunk:
        return chunk if chunk == "[DONE]" else ("error", tuple(chunk["error"]))
    if not chunk["choices"]:
        return (tuple(chunk), tuple(chunk["usage"]))
    choice = chunk["choices"][0]
    delta = tuple((k, tuple(_call(c) for c in v) if k == "tool_calls" else _value(v))
                  for k, v in choice["delta"].items())
    return (tuple(chunk), tuple(choice), delta, choice["finish_reason"],
            choice.get("stop_reason", "absent"), _value(choice.get("logprobs")))


def skeleton(chunks: list[Any]) -> list[Any]:
    out: list[Any] = []
    for chunk in chunks:
        if not out or out[-1] != shape(chunk):
            out.append(shape(chunk))
    return out


def keys(value: Any) -> Any:
    """An object's keys, recursively, in order; a list as the set of its items' shapes."""
    if isinstance(value, dict):
        return tuple((k, keys(v)) for k, v in value.items())
    if isinstance(value, list):
        return ("list", tuple(sorted({repr(keys(v)) for v in value})))
    return _value(value) if value in (None, "") else "value"


def forms(chunks: list[Any]) -> set[str]:
    """The non-text values whose form is vLLM's: call ids and the fingerprint."""
    found = set()
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        if "system_fingerprint" in chunk:
            found.add(f"fingerprint:{bool(FINGERPRINT.match(chunk['system_fingerprint']))}")
        for choice in chunk.get("choices") or ():
            message = choice.get("delta") or choice.get("message") or {}
            for call in message.get("tool_calls") or ():
                if call.get("id"):
                    found.add(f"call id:{bool(CALL_ID.match(call['id']))}")
    return found


@pytest.mark.parametrize("name", captures())
def test_the_simulator_answers_as_real_vllm_032(name: str) -> None:
    real_status, real_body = captured(name)
    status, body = replay(name)
    assert status == real_status, body
    if (REAL / f"{name}.sse").exists() and real_status == 200:
        real_chunks, chunks = data_payloads(real_body), data_payloads(body)
        assert skeleton(chunks) == skeleton(real_chunks)
        assert forms(chunks) == forms(real_chunks)
        return
    real, sim = orjson.loads(real_body), orjson.loads(body)
    if "error" in real:
        assert sim == real  # message (trailer included), type, param, code: all of it
        return
    assert keys(sim) == keys(real)
    assert forms([sim]) == forms([real])


def test_every_captured_chat_request_is_replayed_or_skipped_for_a_reason() -> None:
    replayed = set(captures())
    assert len(replayed) >= 50 and SKIPPED.isdisjoint(replayed)
    assert set(STEER) <= replayed


def test_token_ids_are_filled_only_when_the_request_asks() -> None:
    # vLLM's `return_token_ids`: the captures never set it (every id field there is null)
    config = SimConfig(models=(MODEL,), vllm_version="0.32")
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi there"}],
            "stream": True, "return_token_ids": True, "max_tokens": 3}

    async def post(payload: dict[str, Any]) -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(config))
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as http:
            return await http.post("/v1/chat/completions", json=payload)

    chunks = data_payloads(asyncio.run(post(body)).content)
    first, tokens = chunks[0], chunks[1:-1]
    assert isinstance(first["prompt_token_ids"], list) and first["prompt_text"] is None
    assert [len(c["choices"][0]["token_ids"]) for c in tokens] == [1, 1, 1]
    whole = asyncio.run(post({**body, "stream": False})).json()
    assert len(whole["choices"][0]["token_ids"]) == whole["usage"]["completion_tokens"] == 3
    assert len(whole["prompt_token_ids"]) == whole["usage"]["prompt_tokens"]
