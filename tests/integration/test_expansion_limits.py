"""What one request expands to is bounded by `--max-body-bytes`: item
references, chains, conversations and opened blobs count, and past the limit the request is a
400 naming the parameter before any upstream call or store write. Sealed blobs are stored as
sent, never inflated. The whole app in-process, the simulator as its fleet."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.core.request.items import seal_reasoning
from proxy.core.seal import Sealer
from proxy.runtime import Runtime
from proxy.settings import Settings
from proxy.store import keys
from tests.conftest import SimControl
from tests.integration.test_http_errors import assert_openai_error
from tests.support.inprocess import app_for
from tests.support.servers import ServerProcess

BODY_LIMIT = 64 * 1024
SECRET = "expansion-test-secret"
SEALER = Sealer((SECRET.encode(),), 1 << 20)

App = tuple[httpx.AsyncClient, Runtime]


@pytest.fixture
async def app(simulator: ServerProcess) -> AsyncIterator[App]:
    settings = Settings.of(upstreams=(simulator.url,), max_body_bytes=BODY_LIMIT,
                        fleet_secret=SECRET)
    async with app_for(settings) as pair:
        yield pair


def user(text: str, item_id: str | None = None) -> dict[str, Any]:
    return {"role": "user", "content": text, **({"id": item_id} if item_id else {})}


def create(**body: Any) -> dict[str, Any]:
    return {"model": "sim-model", **body}


async def stored_keys(runtime: Runtime) -> set[bytes]:
    # The embedded store: a test may list it (the proxy never does).
    found = await runtime.store.client.keys("*")  # type: ignore[attr-defined]
    return {key for key in found if not key.startswith(b"jobs:")}  # the worker's own


async def nothing_happens(http: httpx.AsyncClient, runtime: Runtime, sim: SimControl,
                          body: dict[str, Any], param: str) -> None:
    """`body` is refused naming `param`, streamed, in the background or not, and neither the
    fleet nor the store saw anything of it."""
    before, calls = await stored_keys(runtime), sim.stats()["chat_requests"]
    for extra in ({}, {"background": True}, {"stream": True}, {"store": False}):
        refused = await http.post("/v1/responses", json={**body, **extra})
        error = assert_openai_error(refused, 400, param=param)
        assert "--max-body-bytes" in str(error["message"])
    assert_openai_error(await http.post("/v1/responses/input_tokens", json=body), 400,
                        param=param)
    assert await stored_keys(runtime) == before
    assert sim.stats()["chat_requests"] == calls


async def test_item_reference_fan_out_is_a_400_before_any_upstream_call_or_store_write(
        app: App, sim: SimControl) -> None:
    http, runtime = app
    made = await http.post("/v1/responses", json=create(input=[user("x" * 40_000, "msg_big")]))
    assert made.status_code == 200, made.text
    one = await http.post("/v1/responses", json=create(
        input=[{"type": "item_reference", "id": "msg_big"}], store=False))
    assert one.status_code == 200, one.text
    # 64 references in a ~2 KB body: 2.5 MB once expanded.
    fan_out = create(input=[{"type": "item_reference", "id": "msg_big"}] * 64)
    await nothing_happens(http, runtime, sim, fan_out, "input[1].id")


async def test_a_conversation_or_chain_past_the_limit_is_refused(app: App,
                                                                 sim: SimControl) -> None:
    http, runtime = app
    conversation = (await http.post("/v1/conversations", json={})).json()["id"]
    for i in range(3):  # each add well under the body limit, together over it
        added = await http.post(f"/v1/conversations/{conversation}/items",
                                json={"items": [user(f"{i}" * 30_000)]})
        assert added.status_code == 200, added.text
    await nothing_happens(http, runtime, sim, create(input="hi", conversation=conversation),
                          "conversation")
    items = await http.get(f"/v1/conversations/{conversation}/items")
    assert len(items.json()["data"]) == 3  # the refused turn added nothing
    # A chain: 20 KB in, the simulator's 20 KB echo out; 30 KB more is past the limit.
    first = (await http.post("/v1/responses", json=create(input="y" * 20_000))).json()
    await nothing_happens(http, runtime, sim,
                          create(input="z" * 30_000, previous_response_id=first["id"]), "input")


async def test_blobs_whose_text_passes_the_limit_are_a_400(app: App, sim: SimControl) -> None:
    http, runtime = app
    blob = seal_reasoning(SEALER)("r" * 20_000)  # a few hundred bytes sealed, 20 KB opened
    reasoning = {"type": "reasoning", "summary": [], "encrypted_content": blob}
    body = create(input=[user("q"), reasoning, reasoning, reasoning, reasoning])
    await nothing_happens(http, runtime, sim, body, "input[4].encrypted_content")


async def test_a_genuine_blob_past_the_per_blob_cap_is_refused(simulator: ServerProcess,
                                                               sim: SimControl) -> None:
    settings = Settings.of(upstreams=(simulator.url,), fleet_secret=SECRET, max_sealed_bytes=4096)
    blob = seal_reasoning(SEALER)("r" * 5000)
    async with app_for(settings) as (http, _):
        calls = sim.stats()["chat_requests"]
        refused = await http.post("/v1/responses", json=create(input=[
            user("q"), {"type": "reasoning", "summary": [], "encrypted_content": blob}]))
        assert_openai_error(refused, 400, param="input[1].encrypted_content",
                            code="invalid_encrypted_content")
        assert sim.stats()["chat_requests"] == calls


async def test_a_stored_reasoning_item_keeps_its_blob_not_its_text(app: App,
                                                                   sim: SimControl) -> None:
    http, runtime = app
    text = "the sealed line of thought " * 200
    blob = seal_reasoning(SEALER)(text)
    reasoning = {"type": "reasoning", "id": "rs_kept", "summary": [], "encrypted_content": blob}
    made = await http.post("/v1/responses", json=create(input=[
        user("q"), reasoning, {"role": "assistant", "content": "a"}, user("next")]))
    assert made.status_code == 200, made.text
    # The model saw the text ...
    sent = sim.stats()["last_request"]["messages"]
    assert any(m.get("reasoning") == text for m in sent), sent
    # ... the store kept the blob as sent (a few hundred bytes), not the 5 KB it opens to.
    raw = await runtime.store.client.get(keys.response_input(made.json()["id"]))  # type: ignore[attr-defined]
    assert blob.encode() in raw and b"line of thought" not in raw
    listed = (await http.get(f"/v1/responses/{made.json()['id']}/input_items")).json()["data"]
    kept = next(item for item in listed if item["id"] == "rs_kept")
    assert kept["encrypted_content"] == blob and "content" not in kept
    # A conversation's items too.
    conversation = await http.post("/v1/conversations", json={"items": [reasoning]})
    assert conversation.status_code == 200, conversation.text
    item = (await http.get(f"/v1/conversations/{conversation.json()['id']}/items/rs_kept")
            ).json()
    assert item["encrypted_content"] == blob and "content" not in item
