"""Per-key storage budgets: the bytes each client key may keep in the store (its stored
responses and conversations, store/budget/ledger.py counts them). Pure: the store asks `of(tenant)`
at each write it checks.

Where a key's budget comes from, first found: its `--keys-file` entry's `max_stored_bytes`, the
file's `defaults.max_stored_bytes`, then `--max-stored-bytes-per-key` (1 GiB by default). The
last applies to every tenant, keys given with `--api-key` and the anonymous tenant of a proxy
without keys included, so no configuration leaves the shared Redis unbounded by default. 0 is
no limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from proxy.core.errors import QuotaExceeded
from proxy.core.policy.keysfile import KeysFile
from proxy.core.policy.tenancy import tenant_of

# The flag's default. A stored response keeps its input (up to `--max-body-bytes`, 16 MiB) for
# `--response-ttl` (30 days): 1 GiB is 64 of the largest requests, or tens of thousands of
# ordinary turns (a few KiB to a few hundred KiB each) a month. Size Redis's maxmemory for
# the keys that may fill theirs at once (keys x budget), or lower the budget.
DEFAULT_MAX_STORED_BYTES = 1 << 30


@dataclass(frozen=True)
class StorageBudget:
    default: int = 0  # bytes for a tenant not in `by_tenant`; 0: unlimited
    by_tenant: Mapping[str, int] = field(default_factory=dict)

    def of(self, tenant: str) -> int:
        """The tenant's budget in bytes (0: unlimited)."""
        return self.by_tenant.get(tenant, self.default)


UNLIMITED = StorageBudget()


def storage_budget(keys_file: KeysFile | None, api_keys: tuple[str, ...],
                   default: int = DEFAULT_MAX_STORED_BYTES) -> StorageBudget:
    """Budgets by tenant digest (the one the store scopes by)."""
    if keys_file is None:
        return StorageBudget(default)
    file_default = keys_file.defaults.max_stored_bytes
    base = default if file_default is None else file_default
    table = {tenant_of(key): base for key in api_keys}
    for entry in keys_file.keys:
        own = entry.limits.max_stored_bytes  # defaults already merged in
        table[tenant_of(entry.key)] = base if own is None else own
    return StorageBudget(base, table)


def storage_exceeded(budget: int, held: int | None = None) -> QuotaExceeded:
    """The refusal of a storing request (429 `insufficient_quota`, not retried by the SDKs:
    bytes free only as stored objects expire or are deleted)."""
    stored = "" if held is None else f"; {held} bytes stored"
    return QuotaExceeded(
        f"You exceeded this key's storage budget ({budget} bytes{stored}). "
        "Delete stored responses or conversations, or wait for them to expire, then retry; "
        "requests with `store: false` and no conversation are still served.")
