"""Script calls of one loop turn sent as one pipeline (store/connection/coalesce.py), against a real
redis-server, Sentinel's primary and the embedded store: each caller gets its own reply or its
own error, a script the server lost is loaded and sent again, a caller cancelled before the
batch went out writes nothing, a failed round trip fails every call of its batch; and the
store's creates and final writes go through it (one primary; a cluster keeps its own path)."""

from __future__ import annotations

import asyncio

import pytest
from redis import exceptions as rex
from redis.asyncio import Redis

from proxy.store.connection.coalesce import ScriptCoalescer
from proxy.store.redis import RedisStore
from tests.contract.tagged import rid
from tests.contract.test_store_contract import EVENT_TTL, TENANT, TTL, create, response

SET_AND_ECHO = "redis.call('SET', KEYS[1], ARGV[1]); return ARGV[1]"
FAILS_ON_BAD = ("if ARGV[1] == 'bad' then return redis.error_reply('refused') end "
                "redis.call('SET', KEYS[1], ARGV[1]); return ARGV[1]")


@pytest.fixture
def one_primary(store: RedisStore) -> Redis:
    if store.sharded:
        pytest.skip("a cluster sends each call to its slot's node (store/redis.py `_waited`)")
    client: Redis = store.client
    return client


async def test_calls_of_one_turn_share_one_batch_each_with_its_reply(one_primary: Redis) -> None:
    coalescer = ScriptCoalescer(one_primary)
    script = one_primary.register_script(SET_AND_ECHO)
    replies = await asyncio.gather(*(coalescer(script, [f"co:{i}"], [f"v{i}"])
                                     for i in range(50)))
    assert replies == [f"v{i}".encode() for i in range(50)]
    assert (coalescer.batches, coalescer.calls) == (1, 50)
    assert await one_primary.get("co:49") == b"v49"
    # A lone call goes alone, in a batch of its own.
    assert await coalescer(script, ["co:lone"], ["x"]) == b"x"
    assert (coalescer.batches, coalescer.calls) == (2, 51)


async def test_one_calls_error_is_its_own(one_primary: Redis) -> None:
    coalescer = ScriptCoalescer(one_primary)
    script = one_primary.register_script(FAILS_ON_BAD)
    outcomes = await asyncio.gather(coalescer(script, ["co:a"], ["good"]),
                                    coalescer(script, ["co:b"], ["bad"]),
                                    coalescer(script, ["co:c"], ["fine"]),
                                    return_exceptions=True)
    assert outcomes[0] == b"good" and outcomes[2] == b"fine"
    assert isinstance(outcomes[1], rex.ResponseError) and "refused" in str(outcomes[1])
    assert await one_primary.get("co:b") is None
    assert coalescer.batches == 1


async def test_a_script_the_server_lost_is_loaded_and_sent_again(one_primary: Redis) -> None:
    coalescer = ScriptCoalescer(one_primary)
    script = one_primary.register_script(SET_AND_ECHO)
    await coalescer(script, ["co:warm"], ["1"])
    await one_primary.script_flush()
    replies = await asyncio.gather(*(coalescer(script, [f"co:{i}"], [str(i)]) for i in range(5)))
    assert replies == [str(i).encode() for i in range(5)]
    assert await one_primary.get("co:4") == b"4"


async def test_a_caller_cancelled_before_the_batch_left_writes_nothing(
        one_primary: Redis) -> None:
    coalescer = ScriptCoalescer(one_primary)
    script = one_primary.register_script(SET_AND_ECHO)
    kept = asyncio.ensure_future(coalescer(script, ["co:kept"], ["k"]))
    dropped = asyncio.ensure_future(coalescer(script, ["co:dropped"], ["d"]))
    await asyncio.sleep(0)  # both joined the batch; it has not gone out yet
    dropped.cancel()
    assert await kept == b"k"
    with pytest.raises(asyncio.CancelledError):
        await dropped
    assert await one_primary.get("co:dropped") is None
    assert coalescer.calls == 1


async def test_a_failed_round_trip_fails_every_call_of_its_batch() -> None:
    # Nothing listens on port 1: the pipeline's connection is refused.
    dead = Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
    try:
        coalescer = ScriptCoalescer(dead)
        script = dead.register_script(SET_AND_ECHO)
        outcomes = await asyncio.wait_for(asyncio.gather(
            *(coalescer(script, [f"co:{i}"], ["x"]) for i in range(3)),
            return_exceptions=True), 10)
        assert all(isinstance(o, rex.ConnectionError) for o in outcomes), outcomes
    finally:
        await dead.aclose()


async def test_a_burst_of_creates_and_final_writes_go_out_in_few_batches(
        store: RedisStore) -> None:
    if store.sharded:
        pytest.skip("a cluster sends each call to its slot's node")
    ids = [rid(f"burst{i}") for i in range(40)]
    await asyncio.gather(*(create(store, an_id) for an_id in ids))
    coalescer = store._coalesced
    assert coalescer.calls == 40 and coalescer.batches <= 2, (coalescer.batches,)
    await asyncio.gather(*(store.finish_response(response(an_id, "completed"), None, tenant=TENANT,
                                                 ttl=TTL,
                                                 event_ttl=EVENT_TTL) for an_id in ids))
    assert coalescer.calls == 80 and coalescer.batches <= 4, (coalescer.batches,)
    for an_id in ids:
        stored = await store.get_response(TENANT, an_id)
        assert stored is not None and stored.response["status"] == "completed"
