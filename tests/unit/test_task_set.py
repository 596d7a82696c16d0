"""services/process/loops.py `TaskSet.shielded`: cleanup that outlives its caller (a stored
stream's final write, a client that leaves): its value or failure is the caller's while the
caller waits; once the caller is cancelled the work goes on, and its failure is logged once."""

from __future__ import annotations

import asyncio
import logging

import pytest

from proxy.services.process.loops import TaskSet


async def test_the_caller_gets_the_value_and_the_failure() -> None:
    tasks = TaskSet()

    async def value() -> int:
        await asyncio.sleep(0)
        return 7

    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("bad")

    assert await tasks.shielded(value()) == 7
    with pytest.raises(ValueError, match="bad"):
        await tasks.shielded(failing())
    assert len(tasks) == 0  # none kept once done


async def test_a_cancelled_caller_leaves_the_work_running_to_its_end(
        caplog: pytest.LogCaptureFixture) -> None:
    tasks = TaskSet()
    gate = asyncio.Event()
    done: list[str] = []

    async def work() -> None:
        await gate.wait()
        done.append("written")
        raise ValueError("after the caller left")

    caller = asyncio.ensure_future(tasks.shielded(work(), name="turn-finish"))
    for _ in range(3):
        await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert done == [] and len(tasks) == 1  # still running
    with caplog.at_level(logging.ERROR, logger="proxy.tasks"):
        gate.set()
        for _ in range(5):
            await asyncio.sleep(0)
    assert done == ["written"] and len(tasks) == 0
    assert [r.getMessage() for r in caplog.records] == ["background task turn-finish failed"]


async def test_work_cancelled_itself_cancels_the_caller() -> None:
    tasks = TaskSet()

    async def cancelled() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await tasks.shielded(cancelled())
