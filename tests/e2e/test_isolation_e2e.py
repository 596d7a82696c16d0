"""Key isolation and the security edges, against a real `serve` process
(uvicorn) with a real redis-server, the simulator as its fleet and the exact cache on.

Key A makes a stored response, a background response, a conversation with items and a cached
answer; key B then gets a 404 (or the error OpenAI gives for that field) on every endpoint that
could reach them, and A still finds everything as it was. Then: no header or log line injected
through ids, metadata or `x-request-id`; nothing a client sends chooses where the proxy
connects (the fleet is configuration; MCP server URLs are refused here); ids are unguessable.
"""

from __future__ import annotations

import json
import re
import secrets
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.fuzz.harness import check_error_body
from tests.support.servers import ServerProcess, free_port, start_proxy

pytestmark = pytest.mark.e2e

KEY_A = "sk-isolation-a"
KEY_B = "sk-isolation-b"
A = {"authorization": f"Bearer {KEY_A}"}
B = {"authorization": f"Bearer {KEY_B}"}
MODEL = "sim-model"
ID = re.compile(r"^(resp|msg|conv)_[0-9a-f]{48}$")


@pytest.fixture(scope="module")
def proxy(simulator: ServerProcess, redis_server: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--api-key", KEY_A, "--api-key", KEY_B,
                         "--cache", "exact", "--log-format", "text",
                         redis_url=f"redis://127.0.0.1:{redis_server.port}/5")
    yield server
    server.stop()


@pytest.fixture
def http(proxy: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy.url, timeout=60) as client:
        yield client


def _error(response: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, (response.request.url, response.text)
    body = response.json()
    check_error_body(status, body, str(response.request.url))
    if param is not None:
        assert body["error"]["param"] == param, body
    return dict(body["error"])


def _a_objects(http: httpx.Client) -> dict[str, str]:
    stored = http.post("/v1/responses", headers=A, json={
        "model": MODEL, "input": "isolation stored", "metadata": {"owner": "a"}})
    assert stored.status_code == 200, stored.text
    background = http.post("/v1/responses", headers=A, json={
        "model": MODEL, "input": "isolation background", "background": True})
    assert background.status_code == 200, background.text
    conversation = http.post("/v1/conversations", headers=A, json={
        "items": [{"role": "user", "content": "isolation item"}], "metadata": {"owner": "a"}})
    assert conversation.status_code == 200, conversation.text
    conv_id = conversation.json()["id"]
    item_id = http.get(f"/v1/conversations/{conv_id}/items", headers=A).json()["data"][0]["id"]
    return {"response": stored.json()["id"], "background": background.json()["id"],
            "conversation": conv_id, "item": item_id,
            "output_item": stored.json()["output"][0]["id"]}


def test_another_key_gets_404_on_every_endpoint(http: httpx.Client) -> None:
    a = _a_objects(http)
    resp, conv, item = a["response"], a["conversation"], a["item"]
    refused = [
        http.get(f"/v1/responses/{resp}", headers=B),
        http.get(f"/v1/responses/{resp}", headers=B, params={"stream": "true"}),
        http.get(f"/v1/responses/{resp}", headers=B,
                 params={"stream": "true", "starting_after": "0"}),
        http.get(f"/v1/responses/{resp}/input_items", headers=B),
        http.post(f"/v1/responses/{a['background']}/cancel", headers=B),
        http.delete(f"/v1/responses/{resp}", headers=B),
        http.get(f"/v1/conversations/{conv}", headers=B),
        http.post(f"/v1/conversations/{conv}", headers=B, json={"metadata": {"owner": "b"}}),
        http.get(f"/v1/conversations/{conv}/items", headers=B),
        http.post(f"/v1/conversations/{conv}/items", headers=B,
                  json={"items": [{"role": "user", "content": "b was here"}]}),
        http.get(f"/v1/conversations/{conv}/items/{item}", headers=B),
        http.delete(f"/v1/conversations/{conv}/items/{item}", headers=B),
        http.delete(f"/v1/conversations/{conv}", headers=B),
    ]
    for response in refused:
        _error(response, 404)
    # Chaining onto A's objects from B: the errors OpenAI gives for those fields.
    error = _error(http.post("/v1/responses", headers=B, json={
        "model": MODEL, "input": "x", "previous_response_id": resp}), 400, "previous_response_id")
    assert error["code"] == "previous_response_not_found"
    conv_error = http.post("/v1/responses", headers=B, json={
        "model": MODEL, "input": "x", "conversation": conv})
    assert conv_error.status_code in (400, 404), conv_error.text
    assert conv_error.json()["error"]["param"] == "conversation"
    for target in (item, a["output_item"]):
        _error(http.post("/v1/responses", headers=B, json={
            "model": MODEL, "input": [{"type": "item_reference", "id": target}]}), 400,
            "input[0].id")
    # A finds everything as it was: B's refused writes and deletes changed nothing.
    assert http.get(f"/v1/responses/{resp}", headers=A).json()["metadata"] == {"owner": "a"}
    assert http.get(f"/v1/conversations/{conv}", headers=A).json()["metadata"] == {"owner": "a"}
    items = http.get(f"/v1/conversations/{conv}/items", headers=A).json()["data"]
    assert [i["id"] for i in items] == [item]
    assert http.get(f"/v1/responses/{resp}/input_items", headers=A).status_code == 200
    # (`item_reference` resolves the items of stored responses: A's output item, not B's.)
    ok = http.post("/v1/responses", headers=A, json={
        "model": MODEL, "input": [{"type": "item_reference", "id": a["output_item"]}]})
    assert ok.status_code == 200, ok.text


def _stored_with(http: httpx.Client, key: dict[str, str], item_id: str, text: str) -> str:
    made = http.post("/v1/responses", headers=key, json={"model": MODEL, "input": [
        {"type": "message", "id": item_id, "role": "user", "content": text}]})
    assert made.status_code == 200, made.text
    return str(made.json()["id"])


def _referenced_text(http: httpx.Client, key: dict[str, str], item_id: str) -> str:
    """What `item_reference` to `item_id` resolves to for `key` (the new response's input)."""
    made = http.post("/v1/responses", headers=key, json={
        "model": MODEL, "input": [{"type": "item_reference", "id": item_id}]})
    assert made.status_code == 200, made.text
    items = http.get(f"/v1/responses/{made.json()['id']}/input_items", headers=key).json()
    return str(items["data"][0]["content"][0]["text"])


def test_an_item_id_used_by_another_key_neither_blocks_nor_shows(http: httpx.Client) -> None:
    # Item ids are the client's: B stores A's (guessed) id first.
    squatted = f"msg_squat_{secrets.token_hex(6)}"
    _stored_with(http, B, squatted, "B got there first")
    _stored_with(http, A, squatted, "A's own words")
    assert _referenced_text(http, A, squatted) == "A's own words"
    assert _referenced_text(http, B, squatted) == "B got there first"
    # B storing an id A already uses cannot tell it so: B finds its own item, as for any id.
    secret = f"msg_secret_{secrets.token_hex(6)}"
    _stored_with(http, A, secret, "A's secret")
    _stored_with(http, B, secret, "B's probe")
    assert _referenced_text(http, B, secret) == "B's probe"
    # And an id only A uses answers B exactly like an id nobody uses.
    only_a = f"msg_only_{secrets.token_hex(6)}"
    _stored_with(http, A, only_a, "A alone")
    unknown = f"msg_none_{secrets.token_hex(6)}"
    errors = [_error(http.post("/v1/responses", headers=B, json={
        "model": MODEL, "input": [{"type": "item_reference", "id": target}]}), 400,
        "input[0].id") for target in (only_a, unknown)]
    assert errors[0] == {**errors[1], "message": errors[1]["message"].replace(unknown, only_a)}


def test_the_cache_is_per_key(http: httpx.Client) -> None:
    body = {"model": MODEL, "input": "isolation cache question"}
    first = http.post("/v1/responses", headers=A, json=body)
    again = http.post("/v1/responses", headers=A, json=body)
    assert (first.headers["x-proxy-cache"], again.headers["x-proxy-cache"]) == ("miss", "hit")
    other = http.post("/v1/responses", headers=B, json=body)
    assert other.status_code == 200
    assert other.headers["x-proxy-cache"] == "miss"  # A's entry is not B's
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "isolation chat"}]}
    assert http.post("/v1/chat/completions", headers=A, json=chat).headers[
        "x-proxy-cache"] == "miss"
    assert http.post("/v1/chat/completions", headers=A, json=chat).headers[
        "x-proxy-cache"] == "hit"
    assert http.post("/v1/chat/completions", headers=B, json=chat).headers[
        "x-proxy-cache"] == "miss"


def test_websocket_cannot_continue_another_keys_response(proxy: ServerProcess,
                                                         http: httpx.Client) -> None:
    resp = _a_objects(http)["response"]
    url = proxy.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers=B, open_timeout=10, close_timeout=5) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "go on",
                            "previous_response_id": resp}))
        frame = json.loads(ws.recv(timeout=30))
        assert frame["type"] == "error" and frame["status"] == 400, frame
        assert frame["error"]["code"] == "previous_response_not_found"
        ws.send(json.dumps({"type": "response.create", "model": MODEL,
                            "input": [{"type": "item_reference",
                                       "id": _a_objects(http)["output_item"]}]}))
        frame = json.loads(ws.recv(timeout=30))
        assert frame["type"] == "error" and frame["error"]["param"] == "input[0].id", frame


def _raw(proxy: ServerProcess, head: bytes) -> bytes:
    """One request over a raw socket (httpx refuses to send CR or LF in a header)."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(head)
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


def _headers_of(answer: bytes) -> list[bytes]:
    head = answer.split(b"\r\n\r\n", 1)[0]
    return [line.lower() for line in head.split(b"\r\n")[1:]]


def test_no_header_or_log_line_is_injected(proxy: ServerProcess, http: httpx.Client) -> None:
    auth = f"Authorization: Bearer {KEY_A}\r\n".encode()
    # A folded continuation line in x-request-id (obs-fold): refused by the server, or at
    # least never echoed as a header of its own.
    folded = _raw(proxy, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth +
                  b"x-request-id: abc\r\n set-cookie: injected=1\r\nConnection: close\r\n\r\n")
    assert not any(h.startswith(b"set-cookie") for h in _headers_of(folded)), folded
    # Percent-encoded CR LF in ids and a bare LF inside a header value.
    for path in (b"/v1/responses/resp_x%0D%0ASet-Cookie:%20injected=1",
                 b"/v1/conversations/conv_x%0d%0aset-cookie:injected/items/i%0Ax"):
        answer = _raw(proxy, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n" + auth +
                      b"Connection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 404"), answer[:200]
        assert not any(h.startswith(b"set-cookie") for h in _headers_of(answer)), answer
    # An x-request-id that is not safe is replaced, never echoed.
    unsafe = http.get("/v1/models", headers={**A, "x-request-id": "a%0d%0aset-cookie: x"})
    assert re.fullmatch(r"req_[0-9a-f]{32}", unsafe.headers["x-request-id"])
    # Metadata with CR LF is stored as data: no header grows out of it, no log line either.
    created = http.post("/v1/responses", headers=A, json={
        "model": MODEL, "input": "isolation metadata",
        "metadata": {"note": "a\r\nset-cookie: injected=1\r\n\r\nINJECTED-LOG-LINE"}})
    assert created.status_code == 200
    assert "set-cookie" not in created.headers
    assert created.json()["metadata"]["note"].startswith("a\r\nset-cookie")
    log = proxy.full_output()
    assert not any(line.lower().startswith(("set-cookie", "injected-log-line"))
                   for line in log.splitlines()), log[-2000:]


def test_nothing_a_client_sends_picks_where_the_proxy_connects(http: httpx.Client) -> None:
    # A listening socket that no request may reach: the fleet is the configured simulator.
    trap = socket.socket()
    trap.bind(("127.0.0.1", free_port()))
    trap.listen(16)
    trap.setblocking(False)
    target = f"http://127.0.0.1:{trap.getsockname()[1]}"
    try:
        _error(http.post("/v1/responses", headers=A, json={"model": target, "input": "x"}), 404,
               "model")
        _error(http.post("/v1/chat/completions", headers=A, json={
            "model": target + "/v1", "messages": [{"role": "user", "content": "x"}]}), 404)
        mcp = http.post("/v1/responses", headers=A, json={
            "model": MODEL, "input": "x", "tools": [{
                "type": "mcp", "server_label": "trap", "server_url": target + "/mcp",
                "require_approval": "never"}]})
        _error(mcp, 400)
        assert mcp.json()["error"]["param"].startswith("tools[0]")
        routed = http.post("/v1/responses", headers={
            **A, "host": target[7:], "x-forwarded-host": target[7:], "x-upstream": target,
            "forwarded": f"host={target[7:]}"}, json={"model": MODEL, "input": "x"})
        assert routed.status_code == 200, routed.text
        with pytest.raises(BlockingIOError):
            trap.accept()  # nobody connected
    finally:
        trap.close()


def test_ids_are_long_random_hex(http: httpx.Client) -> None:
    seen: set[str] = set()
    for _ in range(5):
        body = http.post("/v1/responses", headers=A, json={
            "model": MODEL, "input": "isolation ids", "store": True}).json()
        conv = http.post("/v1/conversations", headers=A, json={}).json()
        for value in (body["id"], body["output"][0]["id"], conv["id"]):
            assert ID.match(value), value  # 192 random bits (core/ids.py: secrets.token_hex)
            seen.add(value)
    assert len(seen) == 15
