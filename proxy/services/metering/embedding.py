"""The key an embedding is made for, charged (issue 38 point 10): vectors for a file's chunks
(ingestion), for a search's query (the REST search, the file_search tool). The fleet's work for
them is tokens like a generation's, so they count in the key's `tpm` and `token_budget`.

They are charged when each embedding call returns, not with the request's ticket: an ingestion
runs in a worker long after its request ended, and one search inside a create runs between two
turns of its generation. Before each call the key's budget is read (one GET); a key with
nothing left gets no call (`QuotaExceeded`). What one call may overrun is bounded by the
embedder (services/fleet/embeddings.py cuts a call to what is left).

A key without limits costs nothing: no account is made (`account_for` gives None).
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.services.fleet.embeddings import EmbeddingAccount
from proxy.services.metering.limits import Limiter


@dataclass(frozen=True)
class KeyEmbeddings:
    limiter: Limiter
    tenant: str

    async def left(self) -> int | None:
        return await self.limiter.left(self.tenant)

    async def spent(self, tokens: int) -> None:
        await self.limiter.charge(self.tenant, tokens)


@dataclass(frozen=True)
class EmbeddingAccounts:
    """Every key's account, from the process's one limiter (None: no limits at all)."""

    limiter: Limiter | None = None

    def account_for(self, tenant: str) -> EmbeddingAccount | None:
        limiter = self.limiter
        if limiter is None or not limiter.counts_tokens(tenant):
            return None
        return KeyEmbeddings(limiter, tenant)
