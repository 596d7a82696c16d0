"""The semantic cache in-process: the simulator's deterministic embeddings, the default
threshold (0.95). Every near-miss case prints and asserts its cosine above the threshold, so
the miss is the guard's doing, not the embedding's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.settings import Settings
from proxy.simulator.embeddings import DEFAULT_DIM, cosine, embed
from tests.conftest import SimControl
from tests.integration.test_cache import Client, chat_calls, post, text_of

THRESHOLD = 0.95
QUESTION = (
    "I am preparing a long lecture for first year biology students about energy in ecosystems, "
    "and I would like you to explain in 3 clear sentences how photosynthesis works in green "
    "plants, which molecules take part in the light reactions and the Calvin cycle, and why "
    "this process matters so much for life on earth and for the oxygen in our atmosphere "
    "today, starting from the word \"chlorophyll\" and the chloroplast membranes.")


def similarity(a: str, b: str) -> float:
    return cosine(embed(a, DEFAULT_DIM), embed(b, DEFAULT_DIM))


def semantic(simulator: Any, **changes: Any) -> Settings:
    return Settings.of(**{"upstreams": (simulator.url,), "cache_mode": "semantic",
                       "embedding_model": "sim-model", **changes})


@pytest.fixture
async def app_client(simulator: Any) -> AsyncIterator[Client]:
    app = create_app(semantic(simulator))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            yield http, app.state.runtime


def ask(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "sim-model", "input": text, "store": False, **extra}


async def test_a_paraphrase_hits_and_gets_the_first_answer(app_client: Client,
                                                           sim: SimControl) -> None:
    paraphrase = QUESTION.replace("I would like you to explain", "please, I want you to explain")
    score = similarity(QUESTION, paraphrase)
    print(f"cosine(question, paraphrase) = {score:.4f}")
    assert score >= THRESHOLD
    first = await post(app_client, "/v1/responses", ask(QUESTION))
    assert first.headers["x-proxy-cache"] == "miss"
    calls = chat_calls(sim)
    hit = await post(app_client, "/v1/responses", ask(paraphrase, stream=True))
    assert hit.headers["x-proxy-cache"] == "hit"
    assert text_of(hit) == f"You said: {QUESTION}"
    assert chat_calls(sim) == calls
    _, runtime = app_client
    assert runtime.metrics.value("proxy_cache_hits_total", route="responses",
                                 kind="semantic") == 1


TOPIC = ("how photosynthesis works in green plants, which molecules take part in the light "
         "reactions and the Calvin cycle")
OTHER_TOPICS = ("how volcanoes erupt on islands, which minerals melt in the magma chamber and "
                "the rock cycle",
                "how stars form inside galaxies, which elements fuse in their hot cores and "
                "the stellar life cycle")


async def test_a_different_question_in_the_same_namespace_misses(app_client: Client) -> None:
    other = QUESTION.replace(TOPIC, OTHER_TOPICS[0])
    score = similarity(QUESTION, other)
    print(f"cosine(question, other question) = {score:.4f}")
    assert score < THRESHOLD
    await post(app_client, "/v1/responses", ask(QUESTION))
    reply = await post(app_client, "/v1/responses", ask(other))
    assert reply.headers["x-proxy-cache"] == "miss"
    assert text_of(reply) == f"You said: {other}"


@pytest.mark.parametrize(("old", "new"), [
    ("in 3 clear sentences", "in 4 clear sentences"),
    ("how photosynthesis works", "how photosynthesis does not work"),
    ('the word "chlorophyll"', 'the word "carotene"'),
], ids=["number", "negation", "quoted"])
async def test_near_misses_above_the_threshold_are_refused_by_the_guard(
        app_client: Client, old: str, new: str) -> None:
    changed = QUESTION.replace(old, new)
    assert changed != QUESTION
    score = similarity(QUESTION, changed)
    print(f"cosine(question, {new!r}) = {score:.4f}")
    assert score >= THRESHOLD  # the embedding alone would have served the wrong answer
    await post(app_client, "/v1/responses", ask(QUESTION))
    reply = await post(app_client, "/v1/responses", ask(changed))
    assert reply.headers["x-proxy-cache"] == "miss"
    assert text_of(reply) == f"You said: {changed}"


async def test_the_same_question_under_other_instructions_misses(app_client: Client) -> None:
    await post(app_client, "/v1/responses", ask(QUESTION))
    paraphrase = QUESTION.replace("I would like you to explain", "please, I want you to explain")
    reply = await post(app_client, "/v1/responses", ask(paraphrase, instructions="Be terse."))
    assert reply.headers["x-proxy-cache"] == "miss"


async def test_chat_paraphrase_hits(app_client: Client, sim: SimControl) -> None:
    def chat(text: str) -> dict[str, Any]:
        return {"model": "sim-model", "messages": [{"role": "system", "content": "teach"},
                                                   {"role": "user", "content": text}]}
    await post(app_client, "/v1/chat/completions", chat(QUESTION))
    calls = chat_calls(sim)
    paraphrase = QUESTION.replace("I am preparing", "I'm preparing")
    reply = await post(app_client, "/v1/chat/completions", chat(paraphrase))
    assert reply.headers["x-proxy-cache"] == "hit"
    assert reply.json()["choices"][0]["message"]["content"] == f"You said: {QUESTION}"
    assert chat_calls(sim) == calls


@pytest.mark.parametrize("changes", [
    {"embedding_model": "no-such-embedder"},      # the fleet refuses: 404 model_not_found
    {"cache_embedding_timeout": 0.000001},        # slower than allowed
], ids=["embedding-error", "embedding-slow"])
async def test_an_embedding_that_fails_or_is_slow_is_a_miss(simulator: Any, sim: SimControl,
                                                            changes: dict[str, Any]) -> None:
    app = create_app(semantic(simulator, **changes))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            client = (http, app.state.runtime)
            await post(client, "/v1/responses", ask(QUESTION))
            paraphrase = QUESTION.replace("I am preparing", "I'm preparing")
            reply = await post(client, "/v1/responses", ask(paraphrase))
            assert reply.headers["x-proxy-cache"] == "miss"
            assert text_of(reply) == f"You said: {paraphrase}"
            # the exact side still works without vectors
            assert (await post(client, "/v1/responses", ask(QUESTION))).headers[
                "x-proxy-cache"] == "hit"
            assert app.state.runtime.metrics.value("proxy_cache_embedding_errors_total") >= 1


async def test_a_namespace_keeps_its_newest_entries_only(simulator: Any) -> None:
    app = create_app(semantic(simulator, cache_max_per_namespace=2))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            client = (http, app.state.runtime)
            for topic in (TOPIC, *OTHER_TOPICS):
                reply = await post(client, "/v1/responses", ask(QUESTION.replace(TOPIC, topic)))
                assert reply.headers["x-proxy-cache"] == "miss"
            store = app.state.runtime.store.client
            namespaces = await store.keys("cn:*:v")  # a test may scan; the proxy never does
            assert len(namespaces) == 1 and await store.hlen(namespaces[0]) == 2
            # the newest is still found by its paraphrase; the oldest fell out of the namespace
            newest = QUESTION.replace(TOPIC, OTHER_TOPICS[1]).replace(
                "I am preparing", "I'm preparing")
            assert (await post(client, "/v1/responses", ask(newest))).headers[
                "x-proxy-cache"] == "hit"
            oldest = QUESTION.replace("I am preparing", "I'm preparing")
            assert (await post(client, "/v1/responses", ask(oldest))).headers[
                "x-proxy-cache"] == "miss"
