"""Per-key limits across two proxy instances sharing one real redis-server.

Each limit has its own key in one keys file, so the tests do not share counters. Requests that
must land in one rpm/tpm minute wait (bounded, a few seconds at most) when the minute is about
to turn.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.servers import ServerProcess, start_proxy

pytestmark = pytest.mark.e2e

KEYS = {
    "defaults": {"rpm": 1000},
    "keys": [
        {"key": "sk-rpm", "name": "rpm-team", "rpm": 6},
        {"key": "sk-streams", "name": "streams-team", "max_streams": 2},
        {"key": "sk-tpm", "name": "tpm-team", "tpm": 40},
        {"key": "sk-budget", "name": "budget-team", "token_budget": 50},
        {"key": "sk-chat-budget", "name": "chat-budget-team", "token_budget": 30},
        {"key": "sk-free", "name": "free-team"},
        {"key": "sk-chat-stream", "name": "chat-stream-team", "token_budget": 30},
        {"key": "sk-jobs", "name": "jobs-team", "max_streams": 1, "token_budget": 400},
        {"key": "sk-leaves", "name": "leaving-team", "token_budget": 100000},
        {"key": "sk-cancels", "name": "cancelling-team", "token_budget": 100000},
    ],
}
CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "hello there"}]}


@pytest.fixture(scope="module")
def pair(simulator: ServerProcess, redis_server: ServerProcess,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess,
                                                                     ServerProcess]]:
    path: Path = tmp_path_factory.mktemp("limits") / "keys.yaml"
    # YAML on one instance, JSON on the other: both formats drive the same limits.
    import yaml

    path.write_text(yaml.safe_dump(KEYS))
    json_path = path.with_suffix(".json")
    json_path.write_bytes(orjson.dumps(KEYS))
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    a = start_proxy(simulator.url, "--keys-file", str(path), redis_url=url)
    b = start_proxy(simulator.url, redis_url=url, env={"PROXY_KEYS_FILE": str(json_path)})
    yield a, b
    a.stop()
    b.stop()


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def same_minute(seconds_needed: float = 8.0) -> None:
    """Wait for a fresh minute when this one ends within `seconds_needed` (at most that long)."""
    left = 60 - time.time() % 60
    if left < seconds_needed:
        time.sleep(left + 0.2)


def post(server: ServerProcess, path: str, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=auth(key), timeout=30)


def check_rate_limited(response: httpx.Response, code: str = "rate_limit_exceeded") -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error["type"] == code
    assert set(error) == {"message", "type", "param", "code"}
    retry_after = int(response.headers["retry-after"])
    assert 1 <= retry_after <= 60


def test_a_key_not_in_the_file_is_refused(pair: tuple[ServerProcess, ServerProcess]) -> None:
    for server in pair:
        response = post(server, "/v1/chat/completions", "sk-unknown", CHAT)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"
        assert post(server, "/v1/chat/completions", "sk-free", CHAT).status_code == 200


def test_rpm_sum_across_both_instances_stays_within_the_limit(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    same_minute()
    targets = [(a if n % 2 else b) for n in range(16)]
    paths = ["/v1/chat/completions" if n % 3 else "/v1/responses" for n in range(16)]

    def one(n: int) -> httpx.Response:
        body = CHAT if paths[n] == "/v1/chat/completions" else {"model": "sim-model",
                                                                "input": "hi"}
        return post(targets[n], paths[n], "sk-rpm", body)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(16)))
    admitted = [r for r in answers if r.status_code == 200]
    refused = [r for r in answers if r.status_code != 200]
    assert len(admitted) == 6
    for response in refused:
        check_rate_limited(response)
        # Seconds to the next minute: the window the refusal is about.
        assert int(response.headers["retry-after"]) <= 61 - int(time.time() % 60) + 1


def test_max_streams_across_both_instances(pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    slow = {"model": "sim-model", "stream": True,
            "input": "long one [[sim tokens=400 delay_ms=20]]"}
    opened: list[httpx.Response] = []
    readers: list[Iterator[bytes]] = []  # kept: a dropped iterator closes its response
    clients = [httpx.Client(timeout=30) for _ in range(2)]
    try:
        for client, server in zip(clients, (a, b), strict=True):
            request = client.build_request("POST", server.url + "/v1/responses", json=slow,
                                           headers=auth("sk-streams"))
            response = client.send(request, stream=True)
            assert response.status_code == 200
            opened.append(response)
            readers.append(response.iter_raw())
            next(readers[-1])  # the stream is really running
        for server in (a, b):
            third = post(server, "/v1/responses", "sk-streams", {**slow})
            check_rate_limited(third)
            assert third.headers["retry-after"] == "1"
        # A non-streamed request holds no stream slot.
        assert post(a, "/v1/responses", "sk-streams",
                    {"model": "sim-model", "input": "short"}).status_code == 200
        # The client of the stream on A leaves: its slot is freed (released on disconnect).
        opened[0].close()
        clients[0].close()
        deadline = time.monotonic() + 10
        while True:
            again = post(b, "/v1/chat/completions", "sk-streams", {**CHAT, "stream": True})
            if again.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert again.status_code == 200, again.text
    finally:
        for response in opened:
            response.close()
        for client in clients:
            client.close()


def test_tpm_counts_usage_when_a_response_ends(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    same_minute(20)
    # Far more than the 40 tokens a minute: admitted (the minute was empty), then counted.
    first = post(a, "/v1/responses", "sk-tpm",
                 {"model": "sim-model", "input": "count me [[sim tokens=60]]"})
    assert first.status_code == 200, first.text
    assert first.json()["usage"]["total_tokens"] > 40
    for server in (b, a):
        check_rate_limited(post(server, "/v1/chat/completions", "sk-tpm", CHAT))


def test_budget_spent_is_insufficient_quota_on_the_other_instance(
        pair: tuple[ServerProcess, ServerProcess], redis_server: ServerProcess) -> None:
    a, b = pair
    with httpx.stream("POST", a.url + "/v1/responses", headers=auth("sk-budget"), timeout=30,
                      json={"model": "sim-model", "stream": True,
                            "input": "spend it [[sim tokens=70]]"}) as streamed:
        assert streamed.status_code == 200
        assert b"response.completed" in b"".join(streamed.iter_raw())
    # Settled after the stream's last byte: a request sent at once could come before it.
    assert charged_after(redis_server, "sk-budget", 0) >= 50
    refused = post(b, "/v1/responses", "sk-budget", {"model": "sim-model", "input": "more"})
    check_rate_limited(refused, "insufficient_quota")
    assert refused.headers["x-should-retry"] == "false"


def test_chat_usage_from_the_body_and_from_the_stream_counts(
        pair: tuple[ServerProcess, ServerProcess], redis_server: ServerProcess) -> None:
    a, b = pair
    first = post(a, "/v1/chat/completions", "sk-chat-budget",
                 {**CHAT, "messages": [{"role": "user", "content": "x [[sim tokens=10]]"}]})
    assert first.status_code == 200
    used = first.json()["usage"]["total_tokens"]
    assert used < 30
    streamed = post(b, "/v1/chat/completions", "sk-chat-budget",
                    {**CHAT, "stream": True, "stream_options": {"include_usage": True},
                     "messages": [{"role": "user", "content": "y [[sim tokens=30]]"}]})
    assert streamed.status_code == 200
    assert b'"usage"' in streamed.content
    # The stream's tokens are settled after its last byte: a request sent at once can be
    # admitted before they count (seen once the client stopped spending ~70 ms per request).
    assert charged_after(redis_server, "sk-chat-budget", used) >= 30
    check_rate_limited(post(a, "/v1/chat/completions", "sk-chat-budget", CHAT),
                       "insufficient_quota")


def test_concurrent_stream_admissions_never_exceed_max_streams(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    """Eight streams asked for at once on two instances: exactly two run."""
    a, b = pair
    deadline = time.monotonic() + 15  # the previous test's streams may still be releasing
    while post(a, "/v1/responses", "sk-streams",
               {"model": "sim-model", "input": "probe", "stream": True}).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    barrier = threading.Barrier(8)
    statuses: list[int] = []
    lock = threading.Lock()
    release = threading.Event()

    def one(n: int) -> None:
        server = a if n % 2 else b
        with httpx.Client(timeout=30) as client:
            barrier.wait(10)
            request = client.build_request(
                "POST", server.url + "/v1/responses", headers=auth("sk-streams"),
                json={"model": "sim-model", "stream": True,
                      "input": "hold [[sim tokens=300 delay_ms=20]]"})
            response = client.send(request, stream=True)
            with lock:
                statuses.append(response.status_code)
            release.wait(20)
            response.close()

    threads = [threading.Thread(target=one, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while len(statuses) < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    release.set()
    for thread in threads:
        thread.join(25)
    assert sorted(statuses) == [200, 200, 429, 429, 429, 429, 429, 429]


def wait_status(server: ServerProcess, key: str, response_id: str, done: set[str]) -> str:
    deadline = time.monotonic() + 20
    while True:
        status = httpx.get(f"{server.url}/v1/responses/{response_id}", headers=auth(key),
                           timeout=10).json()["status"]
        if status in done or time.monotonic() > deadline:
            return str(status)
        time.sleep(0.1)


def test_a_running_background_job_holds_a_slot_and_counts_its_tokens(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = pair
    job = post(a, "/v1/responses", "sk-jobs",
               {"model": "sim-model", "background": True,
                "input": "work [[sim tokens=150 delay_ms=20]]"})
    assert job.status_code == 200, job.text
    job_id = job.json()["id"]
    assert wait_status(b, "sk-jobs", job_id, {"in_progress", "completed"}) == "in_progress"
    check_rate_limited(post(b, "/v1/responses", "sk-jobs",
                            {"model": "sim-model", "input": "x", "stream": True}))
    assert wait_status(b, "sk-jobs", job_id, {"completed", "failed"}) == "completed"
    # The worker freed the slot when the job ended (bounded wait: it writes the end first).
    deadline = time.monotonic() + 10
    while True:
        again = post(b, "/v1/responses", "sk-jobs",
                     {"model": "sim-model", "input": "y", "stream": True})
        if again.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert again.status_code == 200, again.text
    # 150+ tokens of the job and the stream's own count against the 400-token budget: two
    # more such jobs spend it.
    for _ in range(2):
        spent = post(a, "/v1/responses", "sk-jobs",
                     {"model": "sim-model", "background": True,
                      "input": "more [[sim tokens=150]]"})
        assert spent.status_code == 200, spent.text
        assert wait_status(a, "sk-jobs", spent.json()["id"], {"completed"}) == "completed"
    deadline = time.monotonic() + 5  # the worker counts the usage right after the end
    while True:
        last = post(b, "/v1/responses", "sk-jobs", {"model": "sim-model", "input": "z"})
        if last.status_code == 429 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    check_rate_limited(last, "insufficient_quota")


def test_a_chat_stream_that_did_not_ask_for_usage_is_still_counted(
        pair: tuple[ServerProcess, ServerProcess], redis_server: ServerProcess) -> None:
    a, b = pair
    streamed = post(a, "/v1/chat/completions", "sk-chat-stream",
                    {**CHAT, "stream": True,
                     "messages": [{"role": "user", "content": "y [[sim tokens=40]]"}]})
    assert streamed.status_code == 200
    # The usage chunk the proxy asked for is not passed on: the client did not ask for it.
    assert b'"usage"' not in streamed.content
    assert streamed.content.endswith(b"data: [DONE]\n\n")
    assert charged_after(redis_server, "sk-chat-stream", 0) >= 30  # settled after the close
    check_rate_limited(post(b, "/v1/chat/completions", "sk-chat-stream", CHAT),
                       "insufficient_quota")


def charged(redis_server: ServerProcess, key: str) -> int:
    """What the key's `token_budget` has counted so far, read from the shared Redis."""
    import redis

    from proxy.core.policy.tenancy import tenant_of
    from proxy.store import keys

    with redis.Redis(port=redis_server.port) as client:
        return int(client.get(keys.limit_used(tenant_of(key))) or 0)


def charged_after(redis_server: ServerProcess, key: str, above: int) -> int:
    """The key's count once it passed `above` (the settlement follows the close), bounded."""
    deadline = time.monotonic() + 10
    while (used := charged(redis_server, key)) <= above and time.monotonic() < deadline:
        time.sleep(0.1)
    return used


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {**CHAT, "stream": True, "messages": [
        {"role": "user", "content": "leave me [[sim tokens=400 delay_ms=20]]"}]}),
    ("/v1/responses", {"model": "sim-model", "stream": True,
                       "input": "leave me [[sim tokens=400 delay_ms=20]]"}),
])
def test_a_client_that_leaves_a_stream_is_charged_what_it_got(
        pair: tuple[ServerProcess, ServerProcess], redis_server: ServerProcess,
        path: str, body: dict[str, Any]) -> None:
    a, _ = pair
    before = charged(redis_server, "sk-leaves")
    got = 0
    with httpx.Client(timeout=30) as client:
        request = client.build_request("POST", a.url + path, json=body,
                                       headers={**auth("sk-leaves"), "cache-control": "no-store"})
        response = client.send(request, stream=True)
        assert response.status_code == 200
        for chunk in response.iter_raw():
            got += chunk.count(b'"delta"')
            if got >= 20:
                break
        response.close()  # gone long before the 400 tokens and the usage
    spent = charged_after(redis_server, "sk-leaves", before) - before
    # What it got (and the prompt), not the 400 tokens it asked for, and never nothing.
    assert got <= spent < 400, (got, spent)


def test_a_background_job_cancelled_mid_way_is_charged_what_it_streamed(
        pair: tuple[ServerProcess, ServerProcess], redis_server: ServerProcess) -> None:
    a, b = pair
    before = charged(redis_server, "sk-cancels")
    job = post(a, "/v1/responses", "sk-cancels",
               {"model": "sim-model", "background": True,
                "input": "cancel me [[sim tokens=400 delay_ms=20]]"})
    assert job.status_code == 200, job.text
    job_id = job.json()["id"]
    assert wait_status(b, "sk-cancels", job_id, {"in_progress"}) == "in_progress"
    # Cancelled once 20 of its 400 tokens are in its log, followed from the other instance (a
    # fixed sleep cancelled a job whose generation had not begun on a busy machine: nothing
    # spent, rightly).
    seen = 0
    with httpx.stream("GET", f"{b.url}/v1/responses/{job_id}?stream=true",
                      headers=auth("sk-cancels"), timeout=30) as replay:
        for chunk in replay.iter_raw():
            seen += chunk.count(b"event: response.output_text.delta")
            if seen >= 20:
                break
    assert seen >= 20
    cancelled = httpx.post(f"{b.url}/v1/responses/{job_id}/cancel", headers=auth("sk-cancels"),
                           timeout=10)
    assert cancelled.json()["status"] == "cancelled", cancelled.text
    spent = charged_after(redis_server, "sk-cancels", before) - before
    assert 20 <= spent < 400, spent
