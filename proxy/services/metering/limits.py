"""Per-key limits from `--keys-file`, held across every instance sharing the Redis.

    admit(tenant) ──LIMIT_ADMIT──▶ refused: RateLimited / QuotaExceeded (429, Retry-After)
        │ admitted: a Ticket (a stream lease when the request streams or runs in background)
        ▼
    ... the request runs; its lease is renewed by this instance every lease/3 seconds ...
        ▼
    ticket.end(tokens) ──LIMIT_FINISH──▶ lease freed, tokens added to the minute and the total

What a request spent, and when its ticket ends, is services/metering/meter.py's (the one path every
entry point takes).

Each check and its write is one Lua script (store/limits.py), so two instances admitting at
the same moment cannot both take the last request of a minute or the last stream slot. Costs:
one script per request at admission and one at its end; none per token.

- `rpm`: a fixed one-minute window on the Redis server's clock (the counter resets at each
  minute's start). Simple and exact within a minute; a client may get up to twice `rpm` across a
  minute boundary, the usual price of a fixed window. Retry-After: seconds to the next minute.
- `tpm`: admission checks the tokens used in the current minute; a request's usage (input +
  output) is added once, when it ends. A request admitted while the minute still had room may
  therefore overshoot the limit by its own size; the next one is refused.
- `max_streams`: a lease per open stream (a ZSET member scored by its expiry). Released when
  the stream ends for any reason (completion, failure, client gone: the release runs in a
  `finally`); renewed while it runs; a lease whose instance crashed expires after
  `LEASE_SECONDS` and stops counting. Retry-After: 1 (a slot frees whenever any stream ends).
- `token_budget`: tokens in total; refused (`insufficient_quota`) once spent.

Redis down: a key with a `token_budget` is refused (503 store_unavailable, fail closed): tokens
spent past a budget cannot be taken back, and a budget is usually money. A key with only rate
limits is admitted (fail open): those protect capacity for a minute, and refusing all traffic
because the limiter's store is down would turn a Redis outage into a full outage (stateless
requests otherwise keep working without Redis). Its usage is then not counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.core.errors import ProxyError, QuotaExceeded, RateLimited, StoreUnavailable
from proxy.core.ids import new_id
from proxy.core.policy.keysfile import KeysFile, Limits
from proxy.core.policy.tenancy import tenant_of
from proxy.store.limits import LimitStore
from proxy.telemetry.metrics import LIMIT_REASONS, LimitReason

log = logging.getLogger("proxy.limits")

# A stream lease's life without renewal: how long a crashed instance's slots keep counting.
LEASE_SECONDS = 30.0


@dataclass(frozen=True)
class KeyLimits:
    name: str  # the keys file's name for the key: what logs say instead of the key
    limits: Limits


def limit_table(keys_file: KeysFile | None, api_keys: tuple[str, ...]) -> dict[str, KeyLimits]:
    """Limits by tenant digest (the one the store scopes by). `--api-key` keys get the file's
    defaults, under the name `api-key-<n>`."""
    if keys_file is None:
        return {}
    table = {tenant_of(key): KeyLimits(f"api-key-{n}", keys_file.defaults)
             for n, key in enumerate(api_keys)}
    for entry in keys_file.keys:
        table[tenant_of(entry.key)] = KeyLimits(entry.name, entry.limits)
    return {tenant: held for tenant, held in table.items() if held.limits.any}


@dataclass
class Ticket:
    """One admitted request. `end` (idempotent) frees its stream lease and counts its tokens
    (per minute when the key has a `tpm`, in total when it has a `token_budget`)."""

    limiter: Limiter
    tenant: str
    lease: str | None = None
    per_minute: bool = False
    in_total: bool = False
    ended: bool = field(default=False, init=False)

    async def end(self, tokens: int) -> None:
        if self.ended:
            return
        self.ended = True
        await self.limiter.finish(self, tokens)

    def job_limit(self) -> dict[str, Any]:
        """What a background job's spec carries so its worker can take the ticket over."""
        return {"lease": self.lease, "minute": self.per_minute, "total": self.in_total}

    def hand_over(self) -> None:
        """The job is queued: its worker renews the lease and ends the ticket from now on
        (`Limiter.adopt`). This instance forgets it."""
        self.ended = True
        self.limiter.forget(self)


class Limiter:
    def __init__(self, counters: LimitStore, table: Mapping[str, KeyLimits], *,
                 lease_seconds: float = LEASE_SECONDS,
                 refused: Callable[[LimitReason], None] | None = None) -> None:
        self._table = dict(table)
        self._count_refusal = refused  # proxy_rate_limited_total{reason}
        self._lease_ms = int(lease_seconds * 1000)
        self._lease_seconds = lease_seconds
        self._counters = counters
        # lease id -> the ticket holding it here, renewed by `run`. A job's worker in this
        # process may adopt a lease before the creating request has handed it over: the
        # latest holder wins, and an earlier one's `forget` leaves it alone.
        self._held: dict[str, Ticket] = {}

    @property
    def active(self) -> bool:
        return bool(self._table)

    def set_table(self, table: Mapping[str, KeyLimits]) -> None:
        """The keys changed (services/admin/keyring.py): later admissions use these limits;
        tickets already out keep the ones they were admitted with."""
        self._table = dict(table)

    async def admit(self, tenant: str, *, hold: bool) -> Ticket | None:
        """None when the key has no limits. `hold`: the request keeps a stream slot (a stream
        or a background job) until its ticket ends."""
        held = self._table.get(tenant)
        if held is None:
            return None
        limits = held.limits
        lease = new_id("lease") if hold and limits.max_streams else None
        try:
            verdict, retry = await self._counters.admit(tenant, limits, lease=lease,
                                                        lease_ms=self._lease_ms)
        except StoreUnavailable:
            if limits.token_budget:
                raise  # fail closed: see the module docstring
            log.warning("limits not checked for key %s: the store is unavailable", held.name)
            return self._ticket(tenant, limits, None)
        if verdict != "ok":
            raise self._refused(held, verdict, max(1, int(retry)))
        ticket = self._ticket(tenant, limits, lease)
        if lease is not None:
            self._held[lease] = ticket
        return ticket

    def _ticket(self, tenant: str, limits: Limits, lease: str | None) -> Ticket:
        return Ticket(self, tenant, lease, per_minute=bool(limits.tpm),
                      in_total=bool(limits.token_budget))

    async def adopt(self, tenant: str, job_limit: dict[str, Any]) -> Ticket:
        """A worker starting a background job takes over its ticket (`Ticket.job_limit`)."""
        lease = job_limit.get("lease") or None
        ticket = Ticket(self, tenant, lease, per_minute=bool(job_limit.get("minute")),
                        in_total=bool(job_limit.get("total")))
        if lease is not None:
            self._held[lease] = ticket
            try:
                await self._counters.renew(tenant, [lease], lease_ms=self._lease_ms,
                                           adopt=True)
            except StoreUnavailable as exc:
                log.warning("could not take over a job's stream lease: %s", exc.message)
        return ticket

    def forget(self, ticket: Ticket) -> None:
        if ticket.lease is not None and self._held.get(ticket.lease) is ticket:
            del self._held[ticket.lease]

    def _refused(self, held: KeyLimits, reason: str, retry_after: int) -> ProxyError:
        """The one place a request is refused by a limit (`reason`: rpm, tpm, streams, budget),
        counted in `proxy_rate_limited_total{reason}`."""
        log.info("key %s refused: %s limit reached", held.name, reason)
        if self._count_refusal is not None and reason in LIMIT_REASONS:
            self._count_refusal(reason)
        limits = held.limits
        if reason == "budget":
            return QuotaExceeded(f"You exceeded your token budget ({limits.token_budget} "
                                 "tokens) for this key.")
        what = {"rpm": f"requests per minute ({limits.rpm})",
                "tpm": f"tokens per minute ({limits.tpm})",
                "streams": f"concurrent streams ({limits.max_streams})"}[reason]
        return RateLimited(f"Rate limit reached for this key: {what}. Please try again in "
                           f"{retry_after}s.", retry_after=retry_after)

    async def finish(self, ticket: Ticket, tokens: int) -> None:
        self.forget(ticket)
        if ticket.lease is None and not (tokens > 0 and (ticket.per_minute or ticket.in_total)):
            return  # nothing to free, nothing to count: no round trip
        try:
            await self._counters.finish(ticket.tenant, tokens, lease=ticket.lease,
                                        per_minute=ticket.per_minute,
                                        in_total=ticket.in_total)
        except StoreUnavailable as exc:
            # The lease expires by itself; the tokens are not counted.
            log.warning("could not record the end of a limited request: %s", exc.message)

    # -- work charged outside a request's ticket: embeddings (services/metering/embedding.py)
    def token_limits(self, tenant: str) -> Limits | None:
        """The key's limits when it has a `tpm` or a `token_budget` (its tokens are counted)."""
        held = self._table.get(tenant)
        if held is None or not (held.limits.tpm or held.limits.token_budget):
            return None
        return held.limits

    async def left(self, tenant: str, budget: int | None) -> int | None:
        """Tokens the key may still spend of `budget` (None: no budget). Raises QuotaExceeded
        when none are left, and StoreUnavailable when the count cannot be read (a budget fails
        closed, as at admission)."""
        if not budget:
            return None
        left = budget - await self._counters.used(tenant)
        if left <= 0:
            held = self._table.get(tenant) or KeyLimits("of a queued job",
                                                        Limits(token_budget=budget))
            raise self._refused(held, "budget", 1)
        return left

    def streams_held(self) -> dict[str, int]:
        """Stream leases this process holds, by tenant (keys with `max_streams` only)."""
        held: dict[str, int] = {}
        for ticket in self._held.values():
            held[ticket.tenant] = held.get(ticket.tenant, 0) + 1
        return held

    async def used(self, tenant: str) -> int:
        """Tokens the key spent in total (counted while it has a `token_budget`)."""
        return await self._counters.used(tenant)

    def limits_of(self, tenant: str) -> Limits | None:
        held = self._table.get(tenant)
        return held.limits if held is not None else None

    async def charge(self, tenant: str, tokens: int, *, per_minute: bool,
                     in_total: bool) -> None:
        """Count `tokens` now in the key's minute (`tpm`) and/or total (`token_budget`)."""
        if tokens > 0:
            await Ticket(self, tenant, None, per_minute=per_minute, in_total=in_total
                         ).end(tokens)

    async def run(self) -> None:
        """Renew this instance's leases every third of their life, while it lives."""
        while True:
            await asyncio.sleep(self._lease_seconds / 3)
            by_tenant: dict[str, list[str]] = {}
            for lease, ticket in list(self._held.items()):
                by_tenant.setdefault(ticket.tenant, []).append(lease)
            for tenant, leases in by_tenant.items():
                try:
                    await self._counters.renew(tenant, leases, lease_ms=self._lease_ms)
                except StoreUnavailable as exc:
                    log.warning("could not renew stream leases: %s", exc.message)

