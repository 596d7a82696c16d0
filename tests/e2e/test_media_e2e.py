"""Media URLs end to end: the proxy fetches an allowed image and sends it
to the simulator inline; a URL the fleet must not fetch (the metadata service) is a 400 naming
the part, on /v1/responses and on the chat pass-through."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import SimControl
from tests.support.servers import ServerProcess, start_proxy
from tests.support.webfiles import static_server

pytestmark = pytest.mark.e2e

AUTH = {"authorization": "Bearer sk-test"}
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
METADATA = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"


@pytest.fixture(scope="module")
def images() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    with static_server({"/cat.png": ("image/png", PNG)}, seen) as url:
        yield url, seen


@pytest.fixture(scope="module")
def fetching(simulator: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--fetch-allow", "http://127.0.0.1:")
    yield server
    server.stop()


def create(server: ServerProcess, url: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/responses", headers=AUTH, timeout=30, json={
        "model": "sim-model", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "what is it?"},
            {"type": "input_image", "image_url": url}]}]})


def test_an_allowed_image_is_fetched_by_the_proxy_and_the_answer_comes(
        fetching: ServerProcess, images: tuple[str, list[str]]) -> None:
    base, seen = images
    answer = create(fetching, f"{base}/cat.png")
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "completed"
    assert seen == ["/cat.png"]  # fetched once, by the proxy
    # The stored input keeps the client's URL, not the data.
    items = httpx.get(f"{fetching.url}/v1/responses/{answer.json()['id']}/input_items",
                      headers=AUTH, timeout=10).json()["data"]
    assert items[0]["content"][1]["image_url"] == f"{base}/cat.png"


def test_the_metadata_service_is_refused_naming_the_part(proxy: ServerProcess) -> None:
    refused = create(proxy, METADATA)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "input[0].content[1].image_url"


def test_the_chat_pass_through_is_held_to_the_same_rule(proxy: ServerProcess) -> None:
    refused = httpx.post(f"{proxy.url}/v1/chat/completions", headers=AUTH, timeout=30, json={
        "model": "sim-model", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is it?"},
            {"type": "image_url", "image_url": {"url": METADATA}}]}]})
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "messages[0].content[1].image_url"


# Every part spelling vLLM's chat parser fetches, in every role. At default
# flags (no --fetch-allow) each is a 400 naming the part and nothing reaches the replica; with
# the allow-list, an allowed URL reaches it only inline.
SPELLINGS = [
    {"type": "input_image", "image_url": METADATA},
    {"image_url": METADATA}, {"image_url": {"url": "http://10.0.0.7/x.png"}},
    {"video_url": METADATA}, {"audio_url": "http://10.0.0.7/a.wav"},
    {"video_url": {"url": METADATA}, "uuid": "v"},
    {"type": "text", "text": "x", "uuid": "u", "image_url": METADATA},
    {"type": "file", "file": {"file_data": "eA==", "filename": "a.txt"}},
    {"type": "mystery", "url": METADATA},
]


@pytest.mark.parametrize("part", SPELLINGS)
@pytest.mark.parametrize("role", ["system", "user", "assistant", "tool"])
def test_no_chat_part_spelling_gets_a_client_url_to_the_replica(
        proxy: ServerProcess, sim: SimControl, part: dict[str, object], role: str) -> None:
    message: dict[str, object] = {"role": role, "content": [{"type": "text", "text": "a"}, part]}
    if role == "tool":
        message["tool_call_id"] = "call_1"
    answer = httpx.post(f"{proxy.url}/v1/chat/completions", headers=AUTH, timeout=30, json={
        "model": "sim-model", "messages": [{"role": "user", "content": "hi"}, message]})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"].startswith("messages[1].content[1]")
    assert sim.stats()["chat_requests"] == 0


def test_an_allowed_url_in_a_vllm_spelling_reaches_the_replica_inline_only(
        fetching: ServerProcess, sim: SimControl, images: tuple[str, list[str]]) -> None:
    base, _ = images
    url = f"{base}/cat.png"
    answer = httpx.post(f"{fetching.url}/v1/chat/completions", headers=AUTH, timeout=30, json={
        "model": "sim-model", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is it?"}, {"image_url": url},
            {"type": "input_image", "image_url": url}]}]})
    assert answer.status_code == 200, answer.text
    sent = sim.stats()["last_request"]["messages"][0]["content"]
    assert sent[1]["image_url"].startswith("data:image/png;base64,")
    assert sent[2]["image_url"].startswith("data:image/png;base64,")
    assert "127.0.0.1" not in str(sent)
