"""Prompt templates: `/v1/prompts` over raw HTTP (the SDK has no prompts
resource), `prompt: {id, version, variables}` on a create through the SDK, against a real proxy
on a real redis-server; two keys that cannot see each other's prompts."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess, start_proxy
from tests.support.sse import data_payloads

pytestmark = pytest.mark.e2e

KEY_A, KEY_B = (f"sk-prompts-{name}" for name in "ab")
A, B = ({"authorization": f"Bearer {key}"} for key in (KEY_A, KEY_B))
MODEL = "sim-model"


@pytest.fixture(scope="module")
def proxy(simulator: ServerProcess, redis_server: ServerProcess) -> Iterator[ServerProcess]:
    """Two keys, a real redis-server (the scripts run on Redis itself, not the embedded one)."""
    server = start_proxy(simulator.url, "--api-key", KEY_A, "--api-key", KEY_B,
                         redis_url=f"redis://127.0.0.1:{redis_server.port}/8")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def http(proxy: ServerProcess) -> Iterator[httpx.Client]:
    """Raw HTTP: the SDK has no prompts resource."""
    with httpx.Client(base_url=proxy.url, timeout=30) as client:
        yield client


@pytest.fixture
def a(proxy: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY_A, max_retries=0) as client:
        yield client


def make(http: httpx.Client, body: dict[str, Any], headers: dict[str, str] = A
         ) -> dict[str, Any]:
    answer = http.post("/v1/prompts", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    made: dict[str, Any] = answer.json()
    return made


def test_a_prompt_is_created_versioned_listed_read_by_version_and_deleted(
        http: httpx.Client) -> None:
    made = make(http, {"prompt": "You are {{role}}.", "variables": {"role": "a pirate"}})
    assert made["id"].startswith("pmpt_")
    assert (made["object"], made["version"], made["prompt"]) == ("prompt", "1",
                                                                 "You are {{role}}.")
    one = f"/v1/prompts/{made['id']}"
    second = http.post(one, json={"prompt": "You are {{role}}, briefly."}, headers=A).json()
    assert (second["id"], second["version"]) == (made["id"], "2")
    assert http.get(one, headers=A).json()["version"] == "2"
    first = http.get(one, params={"version": "1"}, headers=A).json()
    assert (first["version"], first["prompt"]) == ("1", "You are {{role}}.")
    assert http.get(one, params={"version": "3"}, headers=A).status_code == 404
    listed = http.get("/v1/prompts", headers=A).json()
    assert listed["object"] == "list"
    assert made["id"] in [p["id"] for p in listed["data"]]
    assert http.delete(one, headers=A).json()["deleted"] is True
    assert http.get(one, headers=A).status_code == 404
    assert http.post(one, json={"prompt": "again"}, headers=A).status_code == 404
    assert http.get("/v1/prompts/pmpt_unknown", headers=A).status_code == 404


def test_another_keys_prompts_are_unknown_ids(http: httpx.Client, proxy: ServerProcess) -> None:
    made = make(http, {"prompt": "The password is swordfish."})
    one = f"/v1/prompts/{made['id']}"
    assert http.get(one, headers=B).status_code == 404
    assert http.post(one, json={"prompt": "mine now"}, headers=B).status_code == 404
    assert http.delete(one, headers=B).status_code == 404
    assert made["id"] not in [p["id"] for p in http.get("/v1/prompts", headers=B).json()["data"]]
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY_B, max_retries=0) as b, \
            pytest.raises(openai.BadRequestError) as caught:
        b.responses.create(model=MODEL, input="hi", prompt={"id": made["id"]})
    assert caught.value.body["param"] == "prompt.id"  # type: ignore[index]
    assert "swordfish" not in str(caught.value.body)
    assert http.get(one, headers=A).json()["version"] == "1"  # B changed nothing


def test_a_create_renders_the_prompt_into_its_instructions_and_echoes_it(
        http: httpx.Client, a: openai.OpenAI) -> None:
    made = make(http, {"prompt": "Answer as {{role}} about {{topic}}. {{notes}}",
                       "variables": {"role": "a pirate"}})
    http.post(f"/v1/prompts/{made['id']}", json={"prompt": "v2 {{topic}}"}, headers=A)
    notes = base64.b64encode(b"Notes: the ship sails at dawn").decode()
    response = a.responses.create(model=MODEL, input="hi", instructions="Be brief.", prompt={
        "id": made["id"], "version": "1",
        "variables": {"topic": {"type": "input_text", "text": "ships"},
                      "notes": {"type": "input_file", "filename": "n.txt",
                                "file_data": notes}}})
    assert response.status == "completed"
    assert response.instructions == ("Answer as a pirate about ships. Notes: the ship sails "
                                     "at dawn\n\nBe brief.")
    assert response.prompt is not None
    assert (response.prompt.id, response.prompt.version) == (made["id"], "1")
    latest = a.responses.create(model=MODEL, input="hi",
                                prompt={"id": made["id"], "variables": {"topic": "sails"}})
    assert latest.instructions == "v2 sails"


def test_a_missing_variable_or_version_is_a_400_naming_it(
        http: httpx.Client, a: openai.OpenAI) -> None:
    made = make(http, {"prompt": "Talk about {{topic}}."})
    with pytest.raises(openai.BadRequestError) as caught:
        a.responses.create(model=MODEL, input="hi", prompt={"id": made["id"]})
    assert caught.value.body["param"] == "prompt.variables.topic"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as caught:
        a.responses.create(model=MODEL, input="hi",
                           prompt={"id": made["id"], "version": "9",
                                   "variables": {"topic": "x"}})
    assert caught.value.body["param"] == "prompt.version"  # type: ignore[index]


def test_a_streamed_create_with_a_prompt_echoes_it_in_valid_events(http: httpx.Client) -> None:
    made = make(http, {"prompt": "Speak of {{topic}}."})
    body = {"model": MODEL, "input": "hi", "stream": True,
            "prompt": {"id": made["id"], "variables": {"topic": "tides"}}}
    with http.stream("POST", "/v1/responses", json=body, headers=A) as answer:
        assert answer.status_code == 200
        events = data_payloads(b"".join(answer.iter_raw()))
    check_stream(events)
    final = events[-1]["response"]
    assert final["instructions"] == "Speak of tides."
    assert final["prompt"] == {"id": made["id"], "version": "1",
                               "variables": {"topic": "tides"}}
    # Stored, the response keeps both.
    kept = http.get(f"/v1/responses/{final['id']}", headers=A).json()
    assert (kept["prompt"], kept["instructions"]) == (final["prompt"], "Speak of tides.")


# A 1x1 PNG: a real image a vision model could be sent.
PIXEL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQ"
         "DwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


@pytest.mark.parametrize("given", ["what is it?", [{"role": "user", "content": "what is it?"}]])
def test_an_image_variable_reaches_the_model_beside_its_name(
        http: httpx.Client, a: openai.OpenAI, sim: Any, given: Any) -> None:
    # The instructions are the fleet's text-only system message: the placeholder names the
    # image there, and the image opens the input as a user message that names it the same way.
    made = make(http, {"prompt": "Describe {{photo}} in one line."})
    response = a.responses.create(model=MODEL, input=given, prompt={
        "id": made["id"], "variables": {"photo": {"type": "input_image", "image_url": PIXEL,
                                                  "detail": "auto"}}})
    assert response.status == "completed"
    assert response.instructions == "Describe [image: photo] in one line."
    assert response.output_text == "You said: what is it?"  # the client's own turn is last
    sent = sim.stats()["last_request"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "user"]
    parts = sent[1]["content"]
    assert [p["type"] for p in parts] == ["text", "text", "image_url"]
    assert parts[1]["text"] == "[image: photo]" and parts[2]["image_url"]["url"] == PIXEL


def _peak_rss(pid: int) -> int:
    """The highest peak RSS (VmHWM, bytes) of the proxy's process and its children."""
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            pids += [int(p) for p in children.read().split()]
    except OSError:
        pass
    peaks = []
    for one in pids:
        with open(f"/proc/{one}/status") as status:
            peaks += [int(line.split()[1]) * 1024 for line in status
                      if line.startswith("VmHWM:")]
    return max(peaks)


def test_a_template_that_expands_past_the_limit_is_refused_on_both_routes_unbuilt(
        http: httpx.Client, proxy: ServerProcess) -> None:
    # 52,428 `{{x}}` with a 2 KiB default render to 107 MB. Both routes that
    # render answer 400 naming `prompt`, and the proxy's peak RSS does not move by anything
    # near that (before the fix: +200 MiB per request).
    made = make(http, {"prompt": "{{x}}" * 52_428, "variables": {"x": "v" * 2048}})
    assert proxy.proc is not None
    before = _peak_rss(proxy.proc.pid)
    for path in ("/v1/responses", "/v1/responses/input_tokens"):
        answer = http.post(path, headers=A, json={"model": MODEL, "input": "hi",
                                                  "prompt": {"id": made["id"]}})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == "prompt"
    assert _peak_rss(proxy.proc.pid) - before < 48 << 20
