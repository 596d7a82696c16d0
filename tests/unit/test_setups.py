"""The set-up gate (services/fleet/setups.py): FIFO, bounded wait, a slot given back on every
path (early through the request's context, at the block's end, on errors, on cancellation while
waiting or while holding), and no slot held while the request waits for a replica slot."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from proxy.core.context.requestctx import CURRENT, RequestContext, end_setup
from proxy.core.errors import RateLimited
from proxy.services.fleet.setups import SetupGate
from tests.integration.test_admission import free_one, saturated, settle


def request(gate: SetupGate, name: str, order: list[str],
            inside: Callable[[], Awaitable[None]] | None = None) -> asyncio.Task[None]:
    """A request's task: its own RequestContext (as the access log gives it), then the gate."""
    async def run() -> None:
        CURRENT.set(RequestContext(name))
        async with gate.held():
            order.append(name)
            if inside is not None:
                await inside()
    return asyncio.create_task(run())


async def one_holding(timeout: float = 5
                      ) -> tuple[SetupGate, asyncio.Event, list[str], asyncio.Task[None]]:
    """A one-slot gate whose slot "r0" holds until the event is set."""
    gate = SetupGate(1, timeout=timeout)
    hold = asyncio.Event()
    order: list[str] = []
    holder = request(gate, "r0", order, hold.wait)
    await settle()
    return gate, hold, order, holder


async def test_waiters_go_in_arrival_order_and_a_newcomer_does_not_barge() -> None:
    gate, hold, order, first = await one_holding()
    waiters = [request(gate, f"r{i}", order) for i in range(1, 5)]
    await settle()
    assert order == ["r0"] and gate.waiting == 4
    hold.set()
    # The slot passes to r1 in the same step as r0 leaves: a request arriving now queues behind.
    late = request(gate, "late", order)
    await asyncio.gather(first, *waiters, late)
    assert order == ["r0", "r1", "r2", "r3", "r4", "late"]
    assert gate.busy == 0 and gate.waiting == 0


async def test_a_wait_is_bounded_and_answered_like_the_admission_queue() -> None:
    gate, hold, order, holder = await one_holding(timeout=0.05)
    with pytest.raises(RateLimited) as refused:
        await request(gate, "r1", order)
    assert refused.value.status == 429 and refused.value.code == "rate_limit_exceeded"
    assert refused.value.headers["Retry-After"] == "1"
    assert gate.waiting == 0  # it left the line
    hold.set()
    await holder
    assert gate.busy == 0


async def test_the_slot_comes_back_on_errors_and_on_cancellation_holding_or_waiting() -> None:
    gate = SetupGate(1, timeout=5)
    order: list[str] = []

    async def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError):
        await request(gate, "error", order, fail)
    assert gate.busy == 0
    holder = request(gate, "holder", order, asyncio.Event().wait)  # the client never leaves...
    await settle()
    waiting = request(gate, "waiting", order)
    await settle()
    waiting.cancel()  # ...this one leaves while queued
    await asyncio.gather(waiting, return_exceptions=True)
    assert gate.waiting == 0 and gate.busy == 1
    holder.cancel()  # and the holder's client goes away mid set-up
    await asyncio.gather(holder, return_exceptions=True)
    assert gate.busy == 0
    await asyncio.wait_for(request(gate, "after", order), 1)
    assert order == ["error", "holder", "after"]


async def test_a_waiter_cancelled_as_it_is_granted_hands_the_slot_on() -> None:
    gate, hold, order, holder = await one_holding()
    granted_then_gone = request(gate, "r1", order)
    next_one = request(gate, "r2", order)
    await settle()
    hold.set()
    await asyncio.sleep(0)  # r0 leaves: the slot is r1's, r1 not resumed yet...
    granted_then_gone.cancel()  # ...and its client leaves right then
    await asyncio.gather(holder, granted_then_gone, next_one, return_exceptions=True)
    assert "r2" in order and gate.busy == 0 and gate.waiting == 0


async def test_end_setup_gives_the_slot_back_early_and_once() -> None:
    gate = SetupGate(2, timeout=5)
    order: list[str] = []
    released = asyncio.Event()
    hold = asyncio.Event()

    async def upstream_open() -> None:
        end_setup()  # what the gateway does once the request is admitted
        end_setup()  # a second call (a tool loop's next turn) is a no-op
        released.set()
        await hold.wait()  # the stream runs on, without a slot

    task = request(gate, "r0", order, upstream_open)
    await released.wait()
    assert gate.busy == 0
    others = [request(gate, f"r{i}", order) for i in (1, 2)]
    await asyncio.gather(*others)
    hold.set()
    await task
    assert gate.busy == 0 and order == ["r0", "r1", "r2"]


async def test_a_request_queued_for_a_replica_does_not_hold_a_set_up_slot() -> None:
    """A burst past the replica's cap: every request that must queue in the admission gives its
    set-up slot up first, so another model's request (room: no replica of it is saturated) is
    set up at once, and the queued ones all get through as slots free (no deadlock)."""
    f, admission = saturated(cap=1)
    gate = SetupGate(2, timeout=5)
    order: list[str] = []

    def admitted(model: str) -> Callable[[], Awaitable[None]]:
        async def admit() -> None:
            await admission.admit(model, "t", on_queue=end_setup)
            order.append(f"admitted {model}")
            if model == "m":
                min(f.replicas, key=lambda r: r.in_flight).in_flight += 1  # as fleet.open
        return admit

    queued = [request(gate, f"m{i}", order, admitted("m")) for i in range(6)]
    await settle()
    assert admission.queued == 6 and gate.busy == 0
    other = request(gate, "x", order, admitted("other"))
    await asyncio.wait_for(other, 1)
    assert "admitted other" in order
    for _ in range(6):
        free_one(f, admission)
        await settle()
    await asyncio.wait_for(asyncio.gather(*queued), 5)
    assert order.count("admitted m") == 6 and gate.busy == 0


async def test_a_waiter_cancelled_after_its_wait_expired_frees_no_slot() -> None:
    gate, hold, order, holder = await one_holding(timeout=60)
    late = request(gate, "r1", order)
    await settle()
    gate._expire(gate._waiters[0])  # its deadline passes (the timer's call, made at once)...
    late.cancel()  # ...and its client leaves before the task resumed with the 429
    await asyncio.gather(late, return_exceptions=True)
    assert gate.busy == 1 and gate.waiting == 0  # r0 still holds the one slot, nobody else
    hold.set()
    await holder
    assert gate.busy == 0
