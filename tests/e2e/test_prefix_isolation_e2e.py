"""The prefix-cache timing attack, through a real `serve` process in front of
a simulator whose prefill costs 2 ms per prompt token not in its prefix cache (vLLM's prefix
cache behaves the same): key B guessing key A's long system prompt sees no speed-up from A's
cached prefix (the proxy salts each key's requests apart), while A's own repeat still hits."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.servers import ServerProcess, start_proxy, start_simulator

pytestmark = pytest.mark.e2e

SECRET = "You are the assistant of ACME. " + " ".join(f"rule-{i}" for i in range(800))


@pytest.fixture(scope="module")
def slow_prefill() -> Iterator[ServerProcess]:
    server = start_simulator("--prefill-ms-per-token", "2")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(slow_prefill: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(slow_prefill.url, "--api-key", "sk-victim", "--api-key", "sk-guesser")
    yield server
    server.stop()


def timed(http: httpx.Client, key: str, path: str, body: dict[str, object]) -> float:
    started = time.perf_counter()
    reply = http.post(path, json=body, headers={"authorization": f"Bearer {key}"})
    assert reply.status_code == 200, reply.text
    return time.perf_counter() - started


def prefix_hits(sim: ServerProcess) -> int:
    hits: int = httpx.get(sim.url + "/sim/stats").json()["prefix_hit_tokens"]
    return hits


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions"])
def test_a_right_guess_of_another_keys_prompt_is_as_slow_as_a_wrong_one(
        proxy: ServerProcess, slow_prefill: ServerProcess, path: str) -> None:
    httpx.post(slow_prefill.url + "/sim/reset").raise_for_status()
    if path == "/v1/responses":
        body: dict[str, object] = {"model": "sim-model", "instructions": SECRET,
                                   "input": "hi", "max_output_tokens": 4}
        wrong: dict[str, object] = {**body, "instructions": SECRET.replace("ACME", "Acme")}
    else:
        body = {"model": "sim-model", "max_tokens": 4, "messages": [
            {"role": "system", "content": SECRET}, {"role": "user", "content": "hi"}]}
        wrong = {**body, "messages": [{"role": "system", "content": SECRET[::-1]},
                                      {"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=proxy.url, timeout=60) as http:
        cold = timed(http, "sk-victim", path, body)  # the victim's prompt, now cached
        assert cold > 1.2  # ~ 800 tokens x 2 ms
        right = timed(http, "sk-guesser", path, body)
        assert prefix_hits(slow_prefill) == 0  # nothing of the victim's cache was used
        wrong_guess = timed(http, "sk-guesser", path, wrong)
        own = timed(http, "sk-victim", path, body)  # the victim's repeat still hits
        assert prefix_hits(slow_prefill) > 700
    assert right > 1.2 and wrong_guess > 1.2
    assert abs(right - wrong_guess) < 0.5 * wrong_guess
    assert own < right / 3
