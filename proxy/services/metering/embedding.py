"""The key an embedding is made for, charged: vectors for a file's chunks
(ingestion), for a search's query (the REST search, the file_search tool). The fleet's work for
them is tokens like a generation's, so they count in the key's `tpm` and `token_budget`.

They are charged when each embedding call returns, not with the request's ticket: an ingestion
runs in a worker long after its request ended, and one search inside a create runs between two
turns of its generation. Before each call the key's budget is read (one GET); a key with
nothing left gets no call (`QuotaExceeded`). What one call may overrun is bounded by the
embedder (services/fleet/embeddings.py cuts a call to what is left).

A key without limits costs nothing: no account is made (`account_for` gives None). An
ingestion's job carries its key's token limits (`job_limit`, as a background response's job
carries its ticket): a worker started without `--keys-file` charges it all the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.services.fleet.embeddings import EmbeddingAccount
from proxy.services.metering.limits import Limiter


@dataclass(frozen=True)
class KeyEmbeddings:
    limiter: Limiter
    tenant: str
    per_minute: bool
    in_total: bool
    budget: int | None

    async def left(self) -> int | None:
        return await self.limiter.left(self.tenant, self.budget)

    async def spent(self, tokens: int) -> None:
        await self.limiter.charge(self.tenant, tokens, per_minute=self.per_minute,
                                  in_total=self.in_total)


@dataclass(frozen=True)
class EmbeddingAccounts:
    """Every key's account, from the process's one limiter (None: no limits at all)."""

    limiter: Limiter | None = None

    def job_limit(self, tenant: str) -> dict[str, Any] | None:
        """The key's token limits as a job's spec carries them (None: it has none)."""
        limits = self.limiter.token_limits(tenant) if self.limiter is not None else None
        if limits is None:
            return None
        return {"minute": bool(limits.tpm), "total": bool(limits.token_budget),
                "budget": limits.token_budget}

    def account_for(self, tenant: str, job_limit: dict[str, Any] | None = None
                    ) -> EmbeddingAccount | None:
        """`job_limit`: the limits a job carried (`job_limit`), else this process's own."""
        limiter = self.limiter
        held = job_limit if job_limit is not None else self.job_limit(tenant)
        if limiter is None or not held:
            return None
        budget = held.get("budget")
        return KeyEmbeddings(limiter, tenant, per_minute=bool(held.get("minute")),
                             in_total=bool(held.get("total")),
                             budget=budget if isinstance(budget, int) and budget > 0 else None)
