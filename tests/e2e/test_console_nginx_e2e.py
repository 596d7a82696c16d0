"""The admin API and the console through nginx (the config we ship) in front of two
instances: any instance serves any page and any admin read, a key made
through one answer is listed by both, and a response's replayed stream passes through."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from tests.support.servers import NginxServer, ServerProcess, start_nginx, start_proxy
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e

ADMIN = "adm-nginx-" + "0123456789abcdef" * 2
DB = 9  # the session redis-server's database of this module's own
HEADERS = {"authorization": f"Bearer {ADMIN}"}


@pytest.fixture(scope="module")
def edge(simulator: ServerProcess, redis_server: ServerProcess) -> Iterator[NginxServer]:
    client = redis.Redis(port=redis_server.port, db=DB)
    client.flushdb()
    client.close()
    url = f"redis://127.0.0.1:{redis_server.port}/{DB}"
    started: list[ServerProcess] = []
    try:
        for _ in range(2):
            started.append(start_proxy(simulator.url, "--admin-key", ADMIN, redis_url=url))
        nginx = start_nginx([started[0].url, started[1].url])
        started.append(nginx)
        yield nginx
    finally:
        for server in reversed(started):
            server.stop()


def test_the_console_and_admin_api_through_nginx(edge: NginxServer) -> None:
    made = httpx.post(edge.url + "/admin/keys", json={"name": "via-nginx"}, headers=HEADERS,
                      timeout=30)
    assert made.status_code == 201, made.text
    for _ in range(4):  # round robin: both instances answer
        page = httpx.get(edge.url + "/console", timeout=30)
        assert page.status_code == 200 and "console.js" in page.text
        assert page.headers["content-security-policy"].startswith("default-src 'self'")
        listed = httpx.get(edge.url + "/admin/keys", headers=HEADERS, timeout=30).json()
        assert [k["name"] for k in listed["data"]] == ["via-nginx"]
    client = {"authorization": f"Bearer {made.json()['key']}"}
    stored = None
    for _ in range(60):  # the other instance takes the new key within its bound (2 s)
        stored = httpx.post(edge.url + "/v1/responses", headers=client, timeout=30,
                            json={"model": "sim-model", "input": "through nginx"})
        if stored.status_code == 200:
            break
        assert stored.status_code == 401
        time.sleep(0.1)
    assert stored is not None and stored.status_code == 200, stored.text
    response_id = stored.json()["id"]
    # One instance answered the create; the other learns the key (and so its name) within its
    # bound (2 s): poll both, round robin, until each names it, for at most 10 s.
    named = 0
    for _ in range(100):
        seen = httpx.get(f"{edge.url}/admin/responses/{response_id}", headers=HEADERS,
                         timeout=30).json()
        assert seen["response"]["status"] == "completed"
        named = named + 1 if seen["key"] == "via-nginx" else 0
        if named == 2:
            break
        time.sleep(0.1)
    assert named == 2, seen["key"]
    for _ in range(2):
        replay = httpx.get(f"{edge.url}/admin/responses/{response_id}/events",
                           params={"starting_after": "1"}, headers=HEADERS, timeout=30)
        assert replay.status_code == 200
        events = data_payloads(replay.text)
        assert events[0]["sequence_number"] == 2
        assert events[-1]["type"] == "response.completed"
