"""The key ring (services/admin/keyring.py): its refresh bound, counted with an injected sleep
and a fake store; the tables it builds from the keys file and the managed keys; auth's lookup."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from proxy.core.policy.apikeys import ManagedKey, created, secret_digest
from proxy.core.policy.keysfile import parse_keys_file
from proxy.core.policy.tenancy import tenant_of
from proxy.services.admin.keyring import KeyConflict, KeyRing, tables

FILE = parse_keys_file({"defaults": {"rpm": 50}, "keys": [
    {"key": "sk-file", "name": "file", "priority": True, "cache_group": "g"}]})


class FakeStore:
    """Counts reads; `version` moves when a key is written."""

    def __init__(self) -> None:
        self.keys: dict[str, ManagedKey] = {}
        self.ver = 0
        self.version_reads = 0
        self.full_reads = 0

    async def version(self) -> int:
        self.version_reads += 1
        return self.ver

    async def all(self) -> tuple[int, list[ManagedKey]]:
        self.full_reads += 1
        return self.ver, list(self.keys.values())

    def write(self, key: ManagedKey) -> None:
        self.keys[key.id] = key
        self.ver += 1


async def test_every_wait_is_the_interval_and_each_is_followed_by_a_version_check() -> None:
    """The bound: a change is seen at the first check after it, and checks are `interval`
    apart, so within `interval` plus one read."""
    store = FakeStore()
    ring = KeyRing(("sk-file",), admin_key="a" * 32, interval=1.0)
    ring.bind(store)  # type: ignore[arg-type]
    waits: list[float] = []
    key, secret = created({"name": "n"})
    await ring.load()  # at start: one full read

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3:
            store.write(key)  # written during the third wait
        if len(waits) == 5:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await ring.run(sleep)
    assert waits == [1.0] * 5
    assert store.version_reads == 4  # one per wait that ended
    assert store.full_reads == 2  # the start's, then only when the version moved
    assert ring.accepts(secret)  # seen at the check right after the third wait


async def test_a_cancel_lost_inside_a_read_still_stops_the_loop() -> None:
    store = FakeStore()
    ring = KeyRing(interval=0.0)
    ring.bind(store)  # type: ignore[arg-type]
    task: asyncio.Task[None] | None = None

    async def swallowing_version() -> int:
        assert task is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):  # what a client library may do
            await asyncio.sleep(10)
        return 0

    store.version = swallowing_version  # type: ignore[method-assign]
    task = asyncio.create_task(ring.run())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)


def test_managed_keys_join_the_file_keys_tables() -> None:
    key = ManagedKey("key_1", "m", secret_digest("sk-m"), 0, tpm=10, priority=True,
                     cache_group="team", max_stored_bytes=99)
    built = tables(FILE, ("sk-api",), [key], 1000)
    managed = tenant_of("sk-m")
    assert built.limits[managed].limits.tpm == 10
    assert built.limits[managed].limits.rpm == 50  # the file's defaults fill the rest
    assert built.limits[tenant_of("sk-file")].limits.rpm == 50
    assert built.priority == {managed, tenant_of("sk-file")}
    assert built.salt_groups == {managed: "team", tenant_of("sk-file"): "g"}
    assert built.stored_bytes[managed] == 99 and built.stored_bytes[tenant_of("sk-api")] == 1000


def test_lookups_accept_fixed_and_managed_keys_never_the_admin_key() -> None:
    now = [100.0]
    ring = KeyRing(("sk-file",), admin_key="a" * 32, clock=lambda: now[0])
    live = ManagedKey("key_1", "m", secret_digest("sk-m"), 0, expires_at=200)
    ring._apply(1, [live])
    assert ring.accepts("sk-file") and ring.accepts("sk-m")
    assert not ring.accepts("a" * 32) and ring.is_admin("a" * 32)
    assert not ring.accepts("sk-other")
    now[0] = 200.0
    assert not ring.accepts("sk-m")  # expired
    ring._apply(2, [])
    now[0] = 100.0
    assert not ring.accepts("sk-m")  # revoked


def test_a_managed_key_also_in_the_file_is_a_conflict() -> None:
    ring = KeyRing(("sk-file",))
    with pytest.raises(KeyConflict):
        ring._apply(1, [ManagedKey("key_1", "m", secret_digest("sk-file"), 0)])
