"""One key's usage against its limits: what `GET /v1/usage` answers its own key, and what the
admin API and the console show per key. Two store reads (the token total, the storage ledger),
never on a request's path."""

from __future__ import annotations

from typing import Any

from proxy.services.admin.keyring import KeyRing
from proxy.services.metering.limits import Limiter
from proxy.store.base import Store


async def usage_of(tenant: str, keys: KeyRing, limiter: Limiter | None,
                   store: Store) -> dict[str, Any]:
    """`tokens_used` is null for a key without a `token_budget`: only budgeted keys' totals
    are kept (counting every key's would add a store write to every unlimited request)."""
    limits = limiter.limits_of(tenant) if limiter is not None else None
    budget = limits.token_budget if limits is not None else None
    used = await limiter.used(tenant) if budget and limiter is not None else None
    tables = keys.tables
    max_stored = tables.stored_bytes.get(tenant, tables.stored_default)
    return {
        "object": "usage",
        "tokens_used": used,
        "token_budget": budget,
        "tokens_left": max(0, budget - used) if budget and used is not None else None,
        "stored_bytes": await store.stored_bytes(tenant),
        "max_stored_bytes": max_stored or None,  # 0: no limit
        "limits": {"rpm": limits.rpm if limits else None,
                   "tpm": limits.tpm if limits else None,
                   "max_streams": limits.max_streams if limits else None},
    }


class Usage:
    """`usage_of` bound to what it reads (the key ring, the limiter, the store): what the web
    layer holds for `GET /v1/usage` and the admin key list."""

    def __init__(self, keys: KeyRing, limiter: Limiter | None, store: Store) -> None:
        self._keys, self._limiter, self._store = keys, limiter, store

    async def of(self, tenant: str) -> dict[str, Any]:
        return await usage_of(tenant, self._keys, self._limiter, self._store)
