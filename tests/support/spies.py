"""An async method watched in place: each call's first argument noted, then the real method
run (for tests that check which calls a component made, and in which order)."""

from __future__ import annotations

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
