"""The services are built alone, with fakes for their collaborators (one such test per room:
test_built_alone_core.py, _store, _services, _web). A service takes the collaborators it uses
(proxy/runtime.py wires the real ones); here `Usage` and `Console` run on a fake limiter, a
fake store and a fake replay, with no app, fleet or Redis behind them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from proxy.core.errors import NotFound
from proxy.core.policy.keysfile import Limits
from proxy.core.types import EventBatch
from proxy.services.admin.console import Console
from proxy.services.admin.keyring import KeyRing
from proxy.services.admin.usage import Usage
from proxy.store.base import ResponseRecord

TENANT = "tenant-a"


class FakeLimiter:
    def limits_of(self, tenant: str) -> Limits | None:
        return Limits(rpm=10, token_budget=100) if tenant == TENANT else None

    async def used(self, tenant: str) -> int:
        return 40


class FakeStore:
    def __init__(self, records: dict[str, ResponseRecord] | None = None) -> None:
        self.records = records or {}
        self.asked: list[str] = []

    async def stored_bytes(self, tenant: str) -> int:
        self.asked.append(tenant)
        return 1234

    async def get_response_any(self, response_id: str) -> ResponseRecord | None:
        return self.records.get(response_id)


class FakeStored:
    def __init__(self) -> None:
        self.replayed: list[tuple[str, int]] = []

    async def replay_record(self, record: ResponseRecord, after: int) -> AsyncIterator[EventBatch]:
        self.replayed.append((record.response["id"], after))
        yield [("response.completed", b"{}")]


async def test_usage_is_read_from_the_limiter_and_store_it_is_given() -> None:
    store = FakeStore()
    usage = Usage(KeyRing(stored_default=5000), cast(Any, FakeLimiter()), cast(Any, store))
    assert await usage.of(TENANT) == {
        "object": "usage", "tokens_used": 40, "token_budget": 100, "tokens_left": 60,
        "stored_bytes": 1234, "max_stored_bytes": 5000,
        "limits": {"rpm": 10, "tpm": None, "max_streams": None},
    }
    assert store.asked == [TENANT]


async def test_the_console_replays_any_keys_response_through_the_replay_it_is_given() -> None:
    record = ResponseRecord({"id": "resp_1", "object": "response"}, "someone-else")
    stored = FakeStored()
    unused = cast(Any, None)  # the fleet, queue and background: this read never touches them
    console = Console(unused, cast(Any, FakeStore({"resp_1": record})), unused, KeyRing(),
                      None, unused, cast(Any, stored))
    found = await console.record("resp_1")
    assert [batch async for batch in console.events(found, 3)] == [
        [("response.completed", b"{}")]]
    assert stored.replayed == [("resp_1", 3)]
    with pytest.raises(NotFound) as missing:
        await console.record("resp_missing")
    assert missing.value.param == "response_id"
