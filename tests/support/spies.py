"""Watched in place, for tests that check what a component did: an async method (each call's
first argument noted, then the real method run), the running loop's timers (when each was
armed)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest


def first_args(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[Any]:
    """The first argument of every later call of `owner.name` (an async method), in order;
    each call still runs the real method."""
    real = getattr(owner, name)
    seen: list[Any] = []

    async def watched(first: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(first)
        return await real(first, *args, **kwargs)

    monkeypatch.setattr(owner, name, watched)
    return seen


def timers_armed(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The times of the running loop's timers armed from here on (its `call_at` watched, until
    `monkeypatch` undoes it)."""
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at = loop.call_at

    def counted(when: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        armed.append(when)
        return call_at(when, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counted)
    return armed
