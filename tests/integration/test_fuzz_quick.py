"""The quick fuzz profile of `make test`: a few hundred generated cases
over every HTTP endpoint of docs/contract.md against the app in-process (its store a real
redis-server, its fleet the simulator over real HTTP). No 5xx, every 4xx in OpenAI's error
shape, no write to Redis by a rejected request, `/healthz` and `/readyz` fine afterwards.
`make fuzz` runs the same targets for minutes against a real uvicorn server
(tests/fuzz/__main__.py); the WebSocket frames run over a real socket in
tests/e2e/test_fuzz_websocket_e2e.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.settings import Settings
from tests.fuzz import harness
from tests.fuzz import strategies as s
from tests.support.servers import ServerProcess

KEY = "sk-fuzz-quick"
CASES_PER_ENDPOINT = 20


@pytest.fixture
def app_client(simulator: ServerProcess, redis_server: ServerProcess) -> Iterator[TestClient]:
    settings = Settings.of(upstreams=(simulator.url,), api_keys=(KEY, "sk-fuzz-other"),
                        redis_url=f"redis://127.0.0.1:{redis_server.port}/3", cache_mode="exact")
    with TestClient(create_app(settings), base_url="http://proxy") as client:
        yield client


@pytest.fixture
def writes(redis_server: ServerProcess) -> Iterator[harness.Writes]:
    watcher = harness.Writes(f"redis://127.0.0.1:{redis_server.port}/3")
    yield watcher
    watcher.close()


@pytest.mark.timeout(240)
def test_every_endpoint_survives_generated_requests(app_client: TestClient,
                                                    writes: harness.Writes) -> None:
    known = harness.make_known(app_client, KEY)
    tally = harness.Tally()
    harness.fuzz_http(app_client, known, KEY, writes, tally, examples=CASES_PER_ENDPOINT)
    targets = harness.http_targets(known, KEY)
    assert set(tally.cases) == set(targets)
    assert tally.total == CASES_PER_ENDPOINT * len(targets)
    assert sum(tally.rejected.values()) > 0  # the state check did run on rejections
    harness.assert_healthy(app_client)
    # The objects the cases aimed at are still there, unchanged by what was refused (a
    # generated DELETE may have removed one: then it is gone, never half-changed).
    for response_id in known.responses:
        got = app_client.get(f"/v1/responses/{response_id}",
                             headers={"authorization": f"Bearer {KEY}"})
        assert got.status_code in (200, 404), got.text


def test_deep_nesting_is_a_400_naming_the_field(app_client: TestClient) -> None:
    auth = {"authorization": f"Bearer {KEY}"}
    for path in ("/v1/responses", "/v1/responses/input_tokens", "/v1/chat/completions",
                 "/v1/conversations"):
        for depth in (70, 900, 5000):
            body = {"model": s.MODEL, "input": "hi", "metadata": s.deep(depth)}
            raw = (b'{"model": "sim-model", "input": "hi", "metadata": '
                   + b"[" * depth + b"]" * depth + b"}") if depth > 1000 else None
            response = (app_client.post(path, headers=auth, content=raw) if raw is not None
                        else app_client.post(path, headers=auth, json=body))
            assert response.status_code == 400, (path, depth, response.text)
            harness.check_error_body(400, response.json(), path)
            if raw is None:
                assert response.json()["error"]["param"] == "metadata"
                assert response.json()["error"]["code"] == "nesting_too_deep"
    harness.assert_healthy(app_client)


def test_the_oracle_can_fail(writes: harness.Writes, redis_server: ServerProcess) -> None:
    """The checks above are not vacuous: a write is seen, a wrong error shape is caught."""
    client = redis.Redis(port=redis_server.port, db=3)
    writes.fence()
    client.set("fuzz:probe", "1")
    client.delete("fuzz:probe")
    assert writes.fence() == [("set", "fuzz:probe"), ("del", "fuzz:probe")]
    assert writes.fence() == []
    client.close()
    for body in ({"error": "x"}, {"detail": "x"},
                 {"error": {"message": "m", "type": "t", "param": None}},
                 {"error": {"message": "", "type": "t", "param": None, "code": None}}):
        with pytest.raises(AssertionError):
            harness.check_error_body(400, body, "probe")
    with pytest.raises(AssertionError):
        harness.check_event({"type": "response.failed", "response": {
            "error": {"code": "server_error", "message": "boom"}}}, "probe")
