"""`serve --log-format json` as a real process: every line it writes is one JSON object, the
access line of a request carries the id the client sent (and the upstream got), and neither the
prompt, the output nor the client's key appears anywhere in the log."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.support.servers import ServerProcess, start_proxy

KEY = "sk-e2e-log-key-abcdef"


@pytest.fixture(scope="module")
def json_proxy(simulator: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--log-format", "json", "--api-key", KEY)
    yield server
    server.stop()


def test_json_log_lines_carry_the_request_id_and_no_secrets(
        json_proxy: ServerProcess, simulator: ServerProcess) -> None:
    headers = {"authorization": f"Bearer {KEY}", "x-request-id": "e2e-log-1"}
    answer = httpx.post(json_proxy.url + "/v1/responses", headers=headers, timeout=30,
                        json={"model": "sim-model", "input": "the walrus sings at noon",
                              "stream": True})
    assert answer.status_code == 200
    assert answer.headers["x-request-id"] == "e2e-log-1"
    assert "response.completed" in answer.text
    with socket.create_connection(("127.0.0.1", json_proxy.port), timeout=5) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")  # uvicorn logs a warning about it
        sock.recv(1024)
    stats = httpx.get(simulator.url + "/sim/stats", timeout=5).json()
    assert re.fullmatch(r"e2e-log-1-[0-9a-f]{8}-1", stats["last_headers"]["x-request-id"])
    json_proxy.stop()  # flushes and closes the log
    lines = [ln for ln in json_proxy.output().splitlines() if ln.strip()]
    # Every line is JSON: start-up lines, uvicorn's own warning, the access line.
    records = [orjson.loads(ln) for ln in lines]
    assert any(r["logger"].startswith("uvicorn") for r in records)
    [access] = [r for r in records if r["request_id"] == "e2e-log-1"
                and r["logger"] == "proxy.access"]
    assert (access["method"], access["route"], access["status"]) == ("POST", "/v1/responses",
                                                                    200)
    assert access["replica"] == simulator.url
    text = "\n".join(lines)
    assert "walrus" not in text
    assert KEY not in text
