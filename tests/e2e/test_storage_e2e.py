"""Per-key storage budgets across two proxy instances sharing one real
redis-server, the simulator as their fleet: a key holding its `max_stored_bytes` gets a 429
`insufficient_quota` on any storing request, from either instance, before any upstream call;
its stateless requests and other keys go on; a delete frees its bytes; bytes whose
`--response-ttl` passed stop counting.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import SimControl
from tests.support.servers import ServerProcess, start_proxy

pytestmark = pytest.mark.e2e

BUDGET = 6000
KEYS = {
    "defaults": {"max_stored_bytes": 10_000_000},
    "keys": [
        {"key": "sk-small", "name": "small", "max_stored_bytes": BUDGET},
        {"key": "sk-roomy", "name": "roomy"},
        {"key": "sk-brief", "name": "brief", "max_stored_bytes": BUDGET},
    ],
}
MODEL = "sim-model"
BIG = "x" * 8000  # one request past the budget (the one that crosses it is let through)


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("storage") / "keys.json"
    path.write_bytes(orjson.dumps(KEYS))
    return path


@pytest.fixture(scope="module")
def pair(simulator: ServerProcess, redis_server: ServerProcess,
         keys_file: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    url = f"redis://127.0.0.1:{redis_server.port}/6"
    a = start_proxy(simulator.url, "--keys-file", str(keys_file), redis_url=url)
    b = start_proxy(simulator.url, "--keys-file", str(keys_file), redis_url=url)
    yield a, b
    a.stop()
    b.stop()


def post(server: ServerProcess, path: str, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=30,
                      headers={"authorization": f"Bearer {key}"})


def check_over_budget(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert error["code"] == error["type"] == "insufficient_quota"
    assert f"storage budget ({BUDGET} bytes" in error["message"]
    assert response.headers["x-should-retry"] == "false"


def test_a_key_past_its_bytes_is_refused_on_every_instance_before_any_upstream_call(
        pair: tuple[ServerProcess, ServerProcess], sim: SimControl) -> None:
    a, b = pair
    stored = post(a, "/v1/responses", "sk-small", {"model": MODEL, "input": BIG})
    assert stored.status_code == 200, stored.text
    before = sim.stats()["chat_requests"]
    for server in (b, a):
        check_over_budget(post(server, "/v1/responses", "sk-small",
                               {"model": MODEL, "input": "one more"}))
        check_over_budget(post(server, "/v1/responses", "sk-small",
                               {"model": MODEL, "input": "later", "background": True}))
        check_over_budget(post(server, "/v1/conversations", "sk-small",
                               {"items": [{"role": "user", "content": "hi"}]}))
        with httpx.stream("POST", server.url + "/v1/responses", timeout=30,
                          headers={"authorization": "Bearer sk-small"},
                          json={"model": MODEL, "input": "streamed", "stream": True}) as s:
            s.read()
            check_over_budget(s)
    assert sim.stats()["chat_requests"] == before  # refused before reaching the fleet
    # What stores nothing is still served, and another key is not affected.
    free = post(b, "/v1/responses", "sk-small", {"model": MODEL, "input": "hi", "store": False})
    assert free.status_code == 200, free.text
    other = post(b, "/v1/responses", "sk-roomy", {"model": MODEL, "input": BIG})
    assert other.status_code == 200, other.text
    # A delete on one instance frees the bytes for the other.
    deleted = httpx.delete(f"{b.url}/v1/responses/{stored.json()['id']}", timeout=30,
                           headers={"authorization": "Bearer sk-small"})
    assert deleted.status_code == 200, deleted.text
    again = post(a, "/v1/responses", "sk-small", {"model": MODEL, "input": "room again"})
    assert again.status_code == 200, again.text


def test_bytes_whose_ttl_passed_stop_counting(simulator: ServerProcess,
                                              redis_server: ServerProcess,
                                              keys_file: Path) -> None:
    brief = start_proxy(simulator.url, "--keys-file", str(keys_file), "--response-ttl", "2",
                        redis_url=f"redis://127.0.0.1:{redis_server.port}/6")
    try:
        written = time.monotonic()
        stored = post(brief, "/v1/responses", "sk-brief", {"model": MODEL, "input": BIG})
        assert stored.status_code == 200, stored.text
        check_over_budget(post(brief, "/v1/responses", "sk-brief",
                               {"model": MODEL, "input": "too soon"}))
        # A 2 s TTL counts in buckets of 1 s: the bytes stop counting within 3 s of the write.
        deadline = written + 10
        while True:
            later = post(brief, "/v1/responses", "sk-brief", {"model": MODEL, "input": "now"})
            if later.status_code == 200 or time.monotonic() > deadline:
                break
            check_over_budget(later)
            time.sleep(0.5)
        assert later.status_code == 200, later.text
        assert time.monotonic() - written >= 1.0  # not at once: the TTL did it
    finally:
        brief.stop()
