"""Embeddings metered and hosted tools vetted, through the official SDK, against one real `serve`
process (its own worker) on a real redis-server, the simulator as the fleet and as the embedding
model:

- a vector-store search makes the fleet embed its query, so it counts in `rpm`;
- the tokens embedded for a key (its files' chunks, its searches' queries) count in
  its `tpm` and `token_budget`; past the budget no embedding is made (the ingestion stops, the
  file ends `failed` saying why; a search is a 429 `insufficient_quota`);
- `file_search` over a store the key does not hold is a 404 naming
  `tools[0].vector_store_ids` before the model runs, over HTTP (JSON, stream, background) and
  the WebSocket; one key holds at most `--ws-max-connections-per-key` sockets.

The counters are read from Redis itself (the key's `lim:{tenant}:used` and minute hash), and the
simulator's own counters show which calls reached the fleet.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
import redis
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from proxy.core.policy.tenancy import tenant_of
from proxy.store import keys
from tests.conftest import SimControl
from tests.support.servers import (
    ServerProcess,
    start_proxy,
    wait_for,
    wait_status,
)

pytestmark = pytest.mark.e2e

MODEL = "sim-model"
DB = 12
WS_PER_KEY = 2
KEYS = {
    "keys": [
        {"key": "sk-meter-rpm", "name": "rpm", "rpm": 3},
        {"key": "sk-meter-count", "name": "count", "tpm": 10_000_000,
         "token_budget": 10_000_000},
        {"key": "sk-meter-budget", "name": "budget", "token_budget": 3000},
        {"key": "sk-meter-owner", "name": "owner", "rpm": 1000},
        {"key": "sk-meter-other", "name": "other", "rpm": 1000},
        {"key": "sk-meter-ws-a", "name": "ws-a", "rpm": 1000},
        {"key": "sk-meter-ws-b", "name": "ws-b", "rpm": 1000},
        {"key": "sk-meter-split", "name": "split", "tpm": 10_000_000,
         "token_budget": 10_000_000},
        {"key": "sk-meter-cache", "name": "cache", "token_budget": 10_000_000},
    ],
}
VALVE = "The Zephyr valve opens at 42 bar of pressure. It is serviced every spring by the crew."
QUESTION = "At what pressure does the Zephyr valve open?"


@pytest.fixture(scope="module")
def store(redis_server: ServerProcess) -> redis.Redis:
    client = redis.Redis(port=redis_server.port, db=DB)
    client.flushdb()
    return client


@pytest.fixture(scope="module")
def proxy(simulator: ServerProcess, redis_server: ServerProcess, store: redis.Redis,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path: Path = tmp_path_factory.mktemp("metering") / "keys.json"
    path.write_bytes(orjson.dumps(KEYS))
    server = start_proxy(simulator.url, "--keys-file", str(path), "--embedding-model", MODEL,
                         "--heartbeat-interval", "0.5",
                         redis_url=f"redis://127.0.0.1:{redis_server.port}/{DB}",
                         env={"PROXY_WS_MAX_CONNECTIONS_PER_KEY": str(WS_PER_KEY)})
    yield server
    server.stop()


def sdk(server: ServerProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def used(store: redis.Redis, key: str) -> int:
    return int(store.get(keys.limit_used(tenant_of(key))) or 0)


def minute(store: redis.Redis, key: str) -> tuple[int, int]:
    """The key's current window (minute number) and the tokens counted in it."""
    window, tokens = store.hmget(keys.limit_minute(tenant_of(key)),
                                 [keys.F_LIMIT_WINDOW, keys.F_LIMIT_TOKENS])
    return int(window or -1), int(tokens or 0)


def same_minute(seconds_needed: float = 10.0) -> None:
    """Wait for a fresh minute when this one ends within `seconds_needed` (at most that long)."""
    left = 60 - time.time() % 60
    if left < seconds_needed:
        time.sleep(left + 0.2)


def indexed(client: openai.OpenAI, text: str, name: str = "notes.txt") -> tuple[str, Any]:
    """A store holding one file of `text`, once its ingestion ended (completed or failed)."""
    file = client.files.create(file=(name, text.encode(), "text/plain"), purpose="assistants")
    made = client.vector_stores.create(name="metered")
    done = client.vector_stores.files.create_and_poll(file_id=file.id, vector_store_id=made.id,
                                                      poll_interval_ms=100)
    return made.id, done


# -- a search counts in rpm ---------------------------------------------------------------------
def test_a_search_counts_in_rpm(proxy: ServerProcess, sim: SimControl) -> None:
    client = sdk(proxy, "sk-meter-rpm")
    same_minute()
    made = client.vector_stores.create(name="empty")  # 1 of the minute's 3
    client.vector_stores.search(made.id, query=QUESTION)  # 2
    client.vector_stores.search(made.id, query=QUESTION)  # 3
    with pytest.raises(openai.RateLimitError) as refused:
        client.vector_stores.search(made.id, query=QUESTION)
    assert refused.value.body["code"] == "rate_limit_exceeded"  # type: ignore[index]
    assert refused.value.response.headers["retry-after"]


# -- embedded tokens count in tpm and the budget ------------------------------------------------
def test_embedded_tokens_count_in_tpm_and_the_budget(proxy: ServerProcess, sim: SimControl,
                                                     store: redis.Redis) -> None:
    key = "sk-meter-count"
    client = sdk(proxy, key)
    before = used(store, key)
    vs_id, done = indexed(client, (VALVE + " ") * 40)
    assert done.status == "completed", done.last_error
    ingested = used(store, key) - before
    assert ingested > 0  # the simulator reports `usage`: its prompt_tokens were charged
    assert minute(store, key)[1] > 0  # ... in the minute too
    sim.reset()
    window, tokens = minute(store, key)
    client.vector_stores.search(vs_id, query=QUESTION)
    assert sim.stats()["embedding_requests"] == 1
    # The query's tokens as the simulator counts them (one per word) are charged, at once, in
    # the total and in the minute (a new minute holds this search alone).
    query = len(QUESTION.split())
    assert used(store, key) - before == ingested + query
    now_window, now_tokens = minute(store, key)
    assert now_tokens == (tokens + query if now_window == window else query)


def test_a_key_past_its_budget_gets_no_more_embedding(proxy: ServerProcess, sim: SimControl,
                                                      store: redis.Redis) -> None:
    key = "sk-meter-budget"
    client = sdk(proxy, key)
    words = " ".join(f"word{i:05d}" for i in range(24_000))  # 240 KB: ~100 chunks
    sim.reset()
    vs_id, done = indexed(client, words)
    assert done.status == "failed"
    assert done.last_error is not None and done.last_error.code == "server_error"
    assert "token budget (3000 tokens)" in done.last_error.message
    spent = used(store, key)
    # Checked before each call, and a call cut to what is left: past the budget by at most one
    # chunk (800 tokens by the local count; the simulator counts a word as one).
    assert 3000 <= spent <= 3000 + 800, spent
    calls = sim.stats()["embedding_requests"]
    assert 1 <= calls <= 10, calls  # each cut to what is left: a few small calls at the end
    with pytest.raises(openai.RateLimitError) as refused:
        client.vector_stores.search(vs_id, query=QUESTION)
    assert refused.value.body["code"] == "insufficient_quota"  # type: ignore[index]
    assert sim.stats()["embedding_requests"] == calls
    assert used(store, key) == spent


@pytest.fixture(scope="module")
def split(simulator: ServerProcess, redis_server: ServerProcess,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess,
                                                                     redis.Redis]]:
    """An HTTP instance with the keys file and no worker, and an instance running the jobs
    started without it (docs/operations.md: worker needs no --keys-file): the jobs carry their key's
    limits. (A second `serve`: the `worker` command takes `--embedding-model` only from
    its environment, PROXY_EMBEDDING_MODEL.)"""
    db = DB + 1
    store = redis.Redis(port=redis_server.port, db=db)
    store.flushdb()
    path: Path = tmp_path_factory.mktemp("split") / "keys.json"
    path.write_bytes(orjson.dumps(KEYS))
    url = f"redis://127.0.0.1:{redis_server.port}/{db}"
    server = start_proxy(simulator.url, "--keys-file", str(path), "--embedding-model", MODEL,
                         "--no-worker", redis_url=url)
    worker = start_proxy(simulator.url, "--embedding-model", MODEL,
                         "--heartbeat-interval", "0.5", redis_url=url)
    yield server, store
    worker.stop()
    server.stop()


def test_a_worker_without_the_keys_file_charges_the_jobs_embeddings(
        split: tuple[ServerProcess, redis.Redis]) -> None:
    server, store = split
    key = "sk-meter-split"
    client = sdk(server, key)
    vs_id, done = indexed(client, (VALVE + " ") * 40)
    assert done.status == "completed", done.last_error
    ingested = used(store, key)
    assert ingested > 0  # the ingestion's chunks, embedded by the worker
    made = client.responses.create(model=MODEL, input=QUESTION, background=True, store=True,
                                   tools=[{"type": "file_search", "vector_store_ids": [vs_id]}])
    final = wait_status(server, made.id, {"completed", "failed", "incomplete"},
                        headers={"authorization": f"Bearer {key}"})
    assert final["status"] == "completed", final
    call = final["output"][0]
    assert call["type"] == "file_search_call" and call["status"] == "completed"
    query_tokens = sum(len(q.split()) for q in call["queries"])  # the simulator's count
    assert wait_for(lambda: used(store, key) > ingested + query_tokens, 10.0)
    assert used(store, key) == ingested + final["usage"]["total_tokens"] + query_tokens


def test_the_semantic_caches_embedding_counts_in_the_budget(
        simulator: ServerProcess, redis_server: ServerProcess, sim: SimControl,
        tmp_path: Path) -> None:
    db = DB + 2
    store = redis.Redis(port=redis_server.port, db=db)
    store.flushdb()
    path = tmp_path / "keys.json"
    path.write_bytes(orjson.dumps(KEYS))
    server = start_proxy(simulator.url, "--keys-file", str(path), "--embedding-model", MODEL,
                         "--cache", "semantic",
                         redis_url=f"redis://127.0.0.1:{redis_server.port}/{db}")
    try:
        key = "sk-meter-cache"
        sim.reset()
        answer = sdk(server, key).responses.create(model=MODEL, input=QUESTION)
        assert sim.stats()["embedding_requests"] == 1  # the lookup embedded the question
        assert answer.usage is not None
        # Its tokens (one per word in the simulator) count with the answer's.
        expected = answer.usage.total_tokens + len(QUESTION.split())
        assert wait_for(lambda: used(store, key) >= expected, 10.0)
        assert used(store, key) == expected
    finally:
        server.stop()


# -- file_search over a store the key does not hold --------------------------------------------
@pytest.fixture(scope="module")
def owned(proxy: ServerProcess) -> str:
    vs_id, done = indexed(sdk(proxy, "sk-meter-owner"), VALVE)
    assert done.status == "completed", done.last_error
    return vs_id


def check_unknown_store(error: openai.NotFoundError, vs_id: str) -> None:
    body: dict[str, Any] = error.body  # type: ignore[assignment]
    assert body["param"] == "tools[0].vector_store_ids"
    assert vs_id in body["message"]


@pytest.mark.parametrize("mode", ["json", "stream", "background"])
def test_file_search_over_a_store_the_key_does_not_hold_is_a_404_before_the_model(
        proxy: ServerProcess, sim: SimControl, owned: str, mode: str) -> None:
    other = sdk(proxy, "sk-meter-other")
    for vs_id in (owned, "vs_unknown0123456789"):
        sim.reset()
        with pytest.raises(openai.NotFoundError) as refused:
            other.responses.create(
                model=MODEL, input=QUESTION, stream=mode == "stream",
                background=mode == "background", store=mode == "background",
                tools=[{"type": "file_search", "vector_store_ids": [vs_id]}])
        check_unknown_store(refused.value, vs_id)
        stats = sim.stats()
        assert stats["chat_requests"] == 0 and stats["embedding_requests"] == 0
    listed = other.responses.create(model=MODEL, input="hi", store=True)  # the key works
    assert listed.status == "completed"
    # The owner still searches its own store.
    answer = sdk(proxy, "sk-meter-owner").responses.create(
        model=MODEL, input=QUESTION, tools=[{"type": "file_search",
                                             "vector_store_ids": [owned]}])
    assert answer.output[0].type == "file_search_call"
    assert answer.output[0].status == "completed"


def socket(server: ServerProcess, key: str) -> ClientConnection:
    url = server.url.replace("http://", "ws://") + "/v1/responses"
    return connect(url, additional_headers={"authorization": f"Bearer {key}"},
                   open_timeout=10, close_timeout=5)


def test_file_search_over_another_keys_store_on_the_websocket(
        proxy: ServerProcess, sim: SimControl, owned: str) -> None:
    sim.reset()
    with socket(proxy, "sk-meter-other") as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": QUESTION,
                            "tools": [{"type": "file_search", "vector_store_ids": [owned]}]}))
        frame = json.loads(ws.recv(timeout=20))
    assert frame["type"] == "error" and frame["status"] == 404, frame
    assert frame["error"]["param"] == "tools[0].vector_store_ids"
    assert sim.stats()["chat_requests"] == 0


# -- WebSocket connections per key -------------------------------------------------------------
def refused_handshake(server: ServerProcess, key: str) -> InvalidStatus:
    with pytest.raises(InvalidStatus) as refused, socket(server, key):
        pass
    return refused.value


def test_websocket_connections_per_key_are_bounded_and_given_back(
        proxy: ServerProcess) -> None:
    with contextlib.ExitStack() as stack:
        held = [stack.enter_context(socket(proxy, "sk-meter-ws-a")) for _ in range(WS_PER_KEY)]
        refused = refused_handshake(proxy, "sk-meter-ws-a")
        assert refused.response.status_code == 429
        assert refused.response.headers["retry-after"] == "1"
        error = json.loads(refused.response.body)["error"]
        assert error["code"] == "rate_limit_exceeded"
        assert "--ws-max-connections-per-key" in error["message"]
        with socket(proxy, "sk-meter-ws-b"):  # another key is not affected
            pass
        # A socket closed cleanly gives its place back; so does one whose client vanished
        # without a close frame (its TCP connection dropped).
        held.pop().close()
        held.append(stack.enter_context(_reconnected(proxy, "sk-meter-ws-a")))
        held.pop().socket.close()
        held.append(stack.enter_context(_reconnected(proxy, "sk-meter-ws-a")))
        refused_handshake(proxy, "sk-meter-ws-a")


def _reconnected(server: ServerProcess, key: str) -> ClientConnection:
    """A new socket of `key`, once the server has seen the last one go (bounded: 10 s)."""
    made: list[ClientConnection] = []

    def attempt() -> bool:
        try:
            made.append(socket(server, key))
        except InvalidStatus:
            return False
        return True

    assert wait_for(attempt, 10.0)
    return made[0]
