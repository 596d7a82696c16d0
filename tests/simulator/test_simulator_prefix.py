"""The simulator's prefix cache: chained 16-token blocks in a bounded LRU (pure), and the time
to first token growing with the part of the prompt the replica has not seen (the app)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from proxy.simulator.app import create_app
from proxy.simulator.config import SimConfig
from proxy.simulator.prefixcache import BLOCK_TOKENS, PrefixCache, prompt_sequence
from proxy.simulator.tokens import prompt_tokens

SYSTEM = {"role": "system", "content": " ".join(f"rule{i}" for i in range(60))}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [SYSTEM]
    for n in range(turns):
        messages.append({"role": "user", "content": f"question {n} " + "word " * 20})
        messages.append({"role": "assistant", "content": f"answer {n} " + "text " * 20})
    return messages[:-1]  # ends with a user turn


@pytest.mark.parametrize("tools", [None, TOOLS])
def test_sequence_length_is_the_reported_prompt_tokens(tools: Any) -> None:
    messages = conversation(3)
    assert len(prompt_sequence(messages, tools)) == prompt_tokens(messages, tools)


def test_next_turn_extends_the_previous_turns_sequence() -> None:
    first, second = prompt_sequence(conversation(1), None), prompt_sequence(conversation(2), None)
    assert second[:len(first)] == first


def test_cold_prompt_misses_whole_and_the_same_prompt_then_hits_its_full_blocks() -> None:
    cache = PrefixCache()
    sequence = prompt_sequence(conversation(2), None)
    cold = cache.admit(sequence)
    assert (cold.hit_tokens, cold.miss_tokens) == (0, len(sequence))
    warm = cache.admit(sequence)
    full = len(sequence) // BLOCK_TOKENS * BLOCK_TOKENS
    assert (warm.hit_tokens, warm.miss_tokens) == (full, len(sequence) - full)


def test_a_follow_up_turn_misses_only_what_is_new() -> None:
    cache = PrefixCache()
    turn1 = prompt_sequence(conversation(1), None)
    cache.admit(turn1)
    turn2 = prompt_sequence(conversation(2), None)
    seen = cache.admit(turn2)
    assert seen.hit_tokens == len(turn1) // BLOCK_TOKENS * BLOCK_TOKENS
    assert seen.miss_tokens == len(turn2) - seen.hit_tokens


def test_blocks_are_chained_a_changed_start_misses_everything_after_it() -> None:
    cache = PrefixCache()
    cache.admit(prompt_sequence(conversation(2), None))
    other = [{"role": "system", "content": "another system prompt"}, *conversation(2)[1:]]
    assert cache.admit(prompt_sequence(other, None)).hit_tokens == 0


def test_capacity_bounds_the_cache_and_forgets_the_least_recent_first() -> None:
    cache = PrefixCache(capacity=4)
    a = [f"a{i}" for i in range(4 * BLOCK_TOKENS)]
    b = [f"b{i}" for i in range(2 * BLOCK_TOKENS)]
    cache.admit(a)
    cache.admit(b)
    assert len(cache) == 4
    assert cache.admit(b).hit_tokens == 2 * BLOCK_TOKENS
    assert cache.admit(a).hit_tokens == 0  # its first blocks went first


def body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "sim-model", "messages": messages,
            "max_tokens": 1}


async def timed(client: httpx.AsyncClient, messages: list[dict[str, Any]]) -> float:
    started = time.perf_counter()
    response = await client.post("/v1/chat/completions", json=body(messages))
    assert response.status_code == 200
    return time.perf_counter() - started


async def test_ttft_grows_with_the_unseen_prefix_and_hits_are_counted() -> None:
    app = create_app(SimConfig(prefill_ms_per_token=2.0))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        long = conversation(4)  # ~300 prompt tokens, never seen: ~0.6 s of prefill
        cold = await timed(client, long)
        warm = await timed(client, long)  # the same prompt: all but a partial block cached
        tokens = prompt_tokens(long, None)
        assert cold >= tokens * 0.002 * 0.9
        assert warm < cold / 3
        stats = (await client.get("/sim/stats")).json()
        full = tokens // BLOCK_TOKENS * BLOCK_TOKENS
        assert stats["prefix_hit_tokens"] == full
        assert stats["prefix_miss_tokens"] == tokens + tokens - full
        assert (await client.post("/sim/reset")).json() == {"reset": True}
        stats = (await client.get("/sim/stats")).json()
        assert (stats["prefix_hit_tokens"], stats["prefix_miss_tokens"]) == (0, 0)
        assert len(app.prefix_cache) == 0  # reset starts cold


async def test_without_a_prefill_cost_hits_are_still_counted() -> None:
    app = create_app(SimConfig())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        messages = conversation(4)
        await timed(client, messages)
        await timed(client, messages)
        assert app.prefill(messages, None) == 0.0
        assert (await client.get("/sim/stats")).json()["prefix_hit_tokens"] > 0


def test_a_salt_partitions_the_cache_as_vllms_cache_salt_does() -> None:
    cache = PrefixCache()
    sequence = prompt_sequence(conversation(2), None)
    full = len(sequence) // BLOCK_TOKENS * BLOCK_TOKENS
    cache.admit(sequence, "salt-a")
    assert cache.admit(sequence, "salt-b").hit_tokens == 0  # another salt: nothing shared
    assert cache.admit(sequence).hit_tokens == 0  # nor without one
    assert cache.admit(sequence, "salt-a").hit_tokens == full  # the same salt hits


async def test_the_timing_of_another_salts_prompt_tells_nothing() -> None:
    """The attack the salt closes: a right guess of another tenant's long prompt answers as
    slowly as a wrong one; the owner's own repeat still hits."""
    app = create_app(SimConfig(prefill_ms_per_token=2.0))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        secret = conversation(4)

        async def timed_salted(salt: str) -> float:
            started = time.perf_counter()
            reply = await client.post("/v1/chat/completions",
                                      json={**body(secret), "cache_salt": salt})
            assert reply.status_code == 200
            return time.perf_counter() - started

        cold = await timed_salted("victim")
        guess = await timed_salted("attacker")
        again = await timed_salted("victim")
        assert guess >= cold * 0.8 and again < guess / 3
        reply = await client.post("/v1/chat/completions", json={**body(secret), "cache_salt": ""})
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "cache_salt"
