"""Embeddings charged to their key (services/fleet/embeddings.py with an
`EmbeddingAccount`) and the per-key socket count (core/policy/keyslots.py). A fake fleet
counts the calls; nothing here waits on time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from proxy.core.errors import QuotaExceeded
from proxy.core.policy.keyslots import KeySlots
from proxy.services.fleet.embeddings import BATCH, Embedder, estimated


@dataclass
class _Response:
    status_code: int = 200


@dataclass
class _Call:
    raw: bytes
    response: _Response = field(default_factory=_Response)

    async def read_all(self) -> bytes:
        return self.raw


@dataclass
class FakeFleet:
    """Answers /v1/embeddings in vLLM's shape; `usage`: report prompt_tokens (as bytes/4)."""

    usage: bool = True
    calls: list[list[str]] = field(default_factory=list)

    async def open(self, model: str, path: str, body: bytes, *, stream: bool) -> _Call:
        texts = orjson.loads(body)["input"]
        self.calls.append(texts)
        answer: dict[str, Any] = {"data": [{"index": i, "embedding": [1.0, 0.0]}
                                           for i in range(len(texts))]}
        if self.usage:
            answer["usage"] = {"prompt_tokens": sum(len(t) // 4 for t in texts),
                               "total_tokens": sum(len(t) // 4 for t in texts)}
        return _Call(orjson.dumps(answer))


@dataclass
class Budget:
    """A key's account as services/metering/embedding.py's, over an in-memory count."""

    budget: int | None
    used: int = 0
    asked: int = 0

    async def left(self) -> int | None:
        self.asked += 1
        if self.budget is None:
            return None
        if self.used >= self.budget:
            raise QuotaExceeded(f"You exceeded your token budget ({self.budget} tokens).")
        return self.budget - self.used

    async def spent(self, tokens: int) -> None:
        self.used += tokens


def embedder(fleet: FakeFleet) -> Embedder:
    return Embedder(fleet, "m")  # type: ignore[arg-type]


async def test_each_call_is_charged_the_fleets_usage() -> None:
    fleet, account = FakeFleet(), Budget(None)
    texts = ["x" * 400] * (BATCH + 6)
    rows = await embedder(fleet).embed(texts, account)
    assert rows.shape == (len(texts), 2)
    assert [len(c) for c in fleet.calls] == [BATCH, 6]
    assert account.used == len(texts) * 100 and account.asked == 2


async def test_without_usage_the_texts_bytes_are_counted() -> None:
    fleet, account = FakeFleet(usage=False), Budget(None)
    await embedder(fleet).embed(["é" * 10, "abcdefgh"], account)
    assert account.used == estimated("é" * 10) + estimated("abcdefgh") == 5 + 2


async def test_a_key_with_nothing_left_gets_no_call() -> None:
    fleet = FakeFleet()
    with pytest.raises(QuotaExceeded):
        await embedder(fleet).embed(["hello"], Budget(10, used=10))
    assert fleet.calls == []


async def test_one_run_overruns_the_budget_by_at_most_one_text() -> None:
    # 200 chunks of 800 tokens against a budget of 3000: three fit, then one more (a call
    # carries at least one text), then nothing: 3200 spent, not the file's 160,000.
    fleet, account = FakeFleet(), Budget(3000)
    with pytest.raises(QuotaExceeded):
        await embedder(fleet).embed(["x" * 3200] * 200, account)
    assert [len(c) for c in fleet.calls] == [3, 1]
    assert account.budget is not None
    assert account.budget <= account.used <= account.budget + estimated("x" * 3200)


def test_sockets_per_key_are_bounded_and_given_back_however_the_holder_ends() -> None:
    slots = KeySlots(2)
    with slots.taken("a") as first, slots.taken("a") as second, slots.taken("a") as third:
        assert (first, second, third) == (True, True, False)
        with slots.taken("b") as other:
            assert other  # another key has its own count
        assert slots.held("a") == 2
    assert slots.held("a") == 0
    with pytest.raises(RuntimeError), slots.taken("a") as held:
        assert held
        raise RuntimeError("the socket failed")
    assert slots.held("a") == 0 and slots.held("b") == 0
