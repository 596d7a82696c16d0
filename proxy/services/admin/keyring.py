"""Every client key this process accepts, and what each may do: the keys file's and
`--api-key`s (fixed at start) with the keys managed live (store/apikeys.py), merged into the
tables auth, the limiter, the fleet's priority, the prefix-cache salts and the storage budget
read.

The bound: every process polls the store's version counter (one GET, off the request path)
every `interval` seconds (1 s by default) and re-reads the records when it moved, then swaps
every table at once, synchronously. So a key created, changed or revoked on any instance is
accepted, applied or refused by every process sharing the store at most `interval` plus one
store round trip after the write returned: README and docs/OPERATIONS-CONSOLE.md state 2 s.
A request never waits on the store for its key: a lookup is a dict read of the SHA-256 of its
key (hashing first means the lookup's timing says nothing about the secret).

While the store is unreachable the last tables stay in force (a revoke made meanwhile waits for
the store to come back); the keys file's keys keep working regardless.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from proxy.core.errors import ProxyError
from proxy.core.policy.apikeys import ManagedKey, secret_digest
from proxy.core.policy.keysfile import KeysFile, Limits
from proxy.core.policy.storagebudget import DEFAULT_MAX_STORED_BYTES, storage_budget
from proxy.core.policy.tenancy import tenant_of
from proxy.services.metering.limits import KeyLimits, limit_table
from proxy.settings.groups import TenancySettings
from proxy.store.apikeys import ManagedKeyStore

log = logging.getLogger("proxy.keys")

REFRESH_SECONDS = 1.0


class KeyConflict(ValueError):
    """A managed key's secret is also in the keys file (or an `--api-key`)."""


@dataclass(frozen=True)
class KeyTables:
    """What the consumers read, for one version of the keys. Built whole, swapped whole."""

    limits: dict[str, KeyLimits] = field(default_factory=dict)
    priority: frozenset[str] = frozenset()
    salt_groups: dict[str, str] = field(default_factory=dict)
    stored_bytes: dict[str, int] = field(default_factory=dict)
    stored_default: int = DEFAULT_MAX_STORED_BYTES


def tables(keys_file: KeysFile | None, api_keys: Sequence[str],
           managed: Sequence[ManagedKey], stored_default: int) -> KeyTables:
    """Pure: the fixed keys' tables with the managed keys' added (a managed key's unset limits
    come from the keys file's `defaults`, as a file key's do)."""
    defaults = keys_file.defaults if keys_file is not None else Limits()
    limits = limit_table(keys_file or KeysFile(), tuple(api_keys))
    budget = storage_budget(keys_file, tuple(api_keys), stored_default)
    stored = dict(budget.by_tenant)
    priority = {tenant_of(e.key) for e in keys_file.keys if e.priority} if keys_file else set()
    groups = ({tenant_of(e.key): e.cache_group for e in keys_file.keys
               if e.cache_group is not None} if keys_file else {})
    for key in managed:
        own = key.limits.over(defaults)
        if own.any:
            limits[key.tenant] = KeyLimits(key.name, own)
        stored[key.tenant] = budget.default if own.max_stored_bytes is None \
            else own.max_stored_bytes
        if key.priority:
            priority.add(key.tenant)
        if key.cache_group is not None:
            groups[key.tenant] = key.cache_group
    return KeyTables(limits, frozenset(priority), groups, stored, budget.default)


class KeyRing:
    def __init__(self, static_keys: Sequence[str] = (), *, admin_key: str | None = None,
                 keys_file: KeysFile | None = None, api_keys: Sequence[str] = (),
                 stored_default: int = DEFAULT_MAX_STORED_BYTES,
                 interval: float = REFRESH_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self._set_static(tuple(static_keys))
        self._admin = admin_key.encode() if admin_key else None
        self._keys_file = keys_file
        self._api_keys = tuple(api_keys)
        self._stored_default = stored_default
        self.interval = interval
        self._clock = clock
        self._store: ManagedKeyStore | None = None
        self._version = -1
        self._by_digest: dict[str, ManagedKey] = {}
        self.managed: tuple[ManagedKey, ...] = ()
        self.tables = tables(keys_file, self._api_keys, (), stored_default)
        self._listeners: list[Callable[[KeyTables], None]] = []

    def _set_static(self, keys: tuple[str, ...]) -> None:
        self.static_keys = keys
        self.static_encoded = [k.encode() for k in keys]
        self._static = self.static_encoded
        self._static_digests = frozenset(secret_digest(k) for k in keys)

    # -- who may call (web/middleware/auth.py, web/routes/admin.py) -----------------------
    @property
    def admin_enabled(self) -> bool:
        return self._admin is not None

    @property
    def required(self) -> bool:
        """A key is needed on /v1/: some are configured, or the operator manages them live."""
        return bool(self._static) or self._admin is not None

    def is_admin(self, token: str) -> bool:
        return self._admin is not None and hmac.compare_digest(token.encode(), self._admin)

    def accepts(self, token: str) -> bool:
        """A client key: a fixed one (constant time over all of them), or a managed one not
        expired. Never the admin key."""
        candidate = token.encode()
        matched = False
        for key in self._static:  # no early exit: timing does not tell which key
            matched |= hmac.compare_digest(candidate, key)
        return matched or self.accepts_managed(token)

    def accepts_managed(self, token: str) -> bool:
        managed = self._by_digest.get(secret_digest(token))
        return managed is not None and not managed.expired(self._clock())

    def managed_key(self, token: str) -> ManagedKey | None:
        return self._by_digest.get(secret_digest(token))

    # -- who reads the tables (runtime.py) ---------------------------------------------------
    def on_change(self, listener: Callable[[KeyTables], None]) -> None:
        self._listeners.append(listener)
        listener(self.tables)

    def bind(self, store: ManagedKeyStore) -> None:
        self._store = store

    @property
    def store(self) -> ManagedKeyStore | None:
        return self._store

    # -- keeping up -----------------------------------------------------------------------------
    async def load(self) -> None:
        """At start: the managed keys, and the refusal of a key both managed and fixed."""
        if self._store is None:
            return
        try:
            await self.refresh(force=True)
        except ProxyError as exc:  # the store down at start: the loop keeps trying
            log.warning("managed keys not read at start: %s", exc.message)

    async def refresh(self, *, force: bool = False) -> bool:
        """Re-read the managed keys when the store's version moved; True when they changed."""
        if self._store is None:
            return False
        if not force and await self._store.version() == self._version:
            return False
        version, managed = await self._store.all()
        self._apply(version, managed)
        return True

    def reload_file(self, read: Callable[[str], KeysFile]) -> bool:
        """SIGHUP: the keys file read again (`read`: settings/checks.py `load_keys_file`). A
        file that cannot be used (unreadable, invalid, a key also managed) leaves the keys
        as they were, said in the log. True when the new file is in force."""
        source = self._keys_file.source if self._keys_file is not None else None
        if source is None:
            return False
        try:
            fresh = read(source)
        except ValueError as exc:  # ConfigError: names the field to fix
            log.error("keys file not reloaded, the previous keys stay in force: %s", exc)
            return False
        static = self._api_keys + tuple(entry.key for entry in fresh.keys)
        digests = {secret_digest(k) for k in static}
        clash = [k for k in self.managed if k.digest in digests]
        if clash:
            log.error("keys file not reloaded: managed key %s (%r) is also in it", clash[0].id,
                      clash[0].name)
            return False
        self._keys_file = fresh
        self._set_static(static)
        self._publish(self.managed)
        log.info("keys file reloaded: %d key(s)", len(fresh.keys))
        return True

    def _publish(self, managed: Sequence[ManagedKey]) -> None:
        self.tables = tables(self._keys_file, self._api_keys, managed, self._stored_default)
        for listener in self._listeners:
            listener(self.tables)

    def _apply(self, version: int, managed: Sequence[ManagedKey]) -> None:
        clash = [k for k in managed if k.digest in self._static_digests]
        if clash:
            raise KeyConflict(f"managed key {clash[0].id} ({clash[0].name!r}) is also given "
                              "in --keys-file or --api-key: remove one of them")
        self._version = version
        self._by_digest = {k.digest: k for k in managed}
        self.managed = tuple(managed)
        self._publish(managed)

    async def run(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """Poll every `interval` seconds (`sleep` injectable: tests count the waits)."""
        task = asyncio.current_task()
        while True:
            await sleep(self.interval)
            try:
                if await self.refresh():
                    log.info("managed keys reloaded: %d key(s)", len(self.managed))
            except ProxyError as exc:
                log.warning("managed keys not refreshed: %s", exc.message)
            except KeyConflict as exc:  # made after start: the last good keys stay in force
                log.error("%s", exc)
            if task is not None and task.cancelling():
                # A cancel that reached the Redis client mid-command can be lost in it (seen:
                # shutdown hung on this loop, asleep though cancelled): honour it here.
                raise asyncio.CancelledError


def budgets_view(ring: KeyRing) -> Mapping[str, int]:
    """The live per-tenant storage budgets, as a mapping the store reads at each write."""
    return _LiveBudgets(ring)


class _LiveBudgets(Mapping[str, int]):
    def __init__(self, ring: KeyRing) -> None:
        self._ring = ring

    def __getitem__(self, tenant: str) -> int:
        return self._ring.tables.stored_bytes[tenant]

    def get(self, tenant: str, default: int | None = None) -> int | None:  # type: ignore[override]
        # The table's own `get`: Mapping's raises and catches a KeyError for every key with no
        # budget of its own (~2.3 µs of each stored create).
        return self._ring.tables.stored_bytes.get(tenant, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ring.tables.stored_bytes)

    def __len__(self) -> int:
        return len(self._ring.tables.stored_bytes)


def keyring_of(tenancy: TenancySettings, *, interval: float = REFRESH_SECONDS) -> KeyRing:
    return KeyRing(tenancy.accepted_keys(), admin_key=tenancy.admin_key,
                   keys_file=tenancy.keys_file, api_keys=tenancy.api_keys,
                   stored_default=tenancy.max_stored_bytes_per_key, interval=interval)
