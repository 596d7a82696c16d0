"""The fleet: which vLLM replicas exist, which are healthy, which models each serves, and which
one takes the next request.

Health and models are hints refreshed in the background (`/health` + `/v1/models` every
`discovery_interval`); a replica that refuses a connection is marked down at once. Choice, among
healthy replicas serving the model: affinity first (the same conversation lands on the same
replica, for vLLM's prefix cache) unless that replica is busier than the least loaded by more than
`AFFINITY_SLACK`, else least in-flight. When nothing is known to be healthy we still try a replica:
the failure then tells the client what is wrong (502), instead of a guess.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core.errors import ModelNotFound, ProxyError, UpstreamUnreachable
from proxy.core.requestctx import note_replica, note_upstream_sent
from proxy.upstream import Response, Upstream

log = logging.getLogger("proxy.fleet")

# How many more in-flight requests than the least loaded replica an affinity target may carry
# before we give up on the prefix cache and balance instead.
AFFINITY_SLACK = 8
# Probes that must fail in a row before a replica that answered before is marked down.
PROBES_TO_DOWN = 2
# On-demand re-discovery (an unknown model may have just been loaded) at most this often.
REDISCOVER_MIN_INTERVAL = 2.0
# The generation call: where a request's time inside the proxy ends (`proxy_overhead_seconds`).
# Preparatory calls (/tokenize for truncation, /v1/embeddings for the semantic cache) count as
# the proxy's work, since the client waits for them before generation starts.
GENERATION_PATH = "/v1/chat/completions"


@dataclass
class Replica:
    url: str
    healthy: bool = False
    known: bool = False  # answered /v1/models at least once
    models: tuple[dict[str, Any], ...] = ()
    model_ids: frozenset[str] = frozenset()
    in_flight: int = 0
    error: str | None = None
    checked_at: float = 0.0
    failed_probes: int = 0  # in a row

    def serves(self, model: str) -> bool:
        return model in self.model_ids


@dataclass
class Call:
    """One open upstream response and the replica lease it holds; `aclose()` ends both."""

    replica: Replica
    response: Response
    _closed: bool = False

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self.replica.in_flight -= 1
            await self.response.aclose()


@dataclass
class Fleet:
    upstream: Upstream
    urls: Sequence[str]
    interval: float = 10.0
    probe_timeout: float = 5.0
    clock: Callable[[], float] = time.monotonic
    replicas: list[Replica] = field(init=False)
    _last_rediscovery: float = field(init=False, default=-1e9)

    def __post_init__(self) -> None:
        self.replicas = [Replica(url) for url in self.urls]

    # -- discovery ---------------------------------------------------------------------------
    async def refresh(self) -> None:
        await asyncio.gather(*(self._probe(r) for r in self.replicas))

    async def _probe(self, replica: Replica) -> None:
        try:
            async with asyncio.timeout(self.probe_timeout):
                await self.upstream.get(replica.url, "/health", timeout=self.probe_timeout)
                listing = await self.upstream.get_json(
                    replica.url, "/v1/models", timeout=self.probe_timeout
                )
            models = tuple(m for m in listing.get("data", []) if isinstance(m, dict))
        except (ProxyError, TimeoutError, AttributeError) as exc:
            reason = str(exc) or type(exc).__name__  # a TimeoutError's str() is empty
            replica.failed_probes += 1
            replica.error = reason
            # One slow probe is weak evidence (a replica, or this process, busy with streams);
            # a refused connection marks it down at once anyway (`open`).
            if replica.failed_probes >= PROBES_TO_DOWN or not replica.known:
                if replica.healthy:
                    log.warning("replica %s is down: %s", replica.url, reason)
                replica.healthy = False
        else:
            replica.failed_probes = 0
            if not replica.healthy:
                log.info("replica %s is up, serving %d model(s)", replica.url, len(models))
            replica.healthy, replica.known, replica.error = True, True, None
            replica.models = models
            replica.model_ids = frozenset(str(m.get("id")) for m in models)
        replica.checked_at = self.clock()

    async def run(self) -> None:
        """Re-probe forever (a lifespan task; cancelled at shutdown)."""
        while True:
            await asyncio.sleep(self.interval)
            await self.refresh()

    def mark_down(self, replica: Replica, reason: str) -> None:
        replica.healthy = False
        replica.error = reason

    # -- choice ------------------------------------------------------------------------------
    async def choose(self, model: str, *, affinity: str | None = None,
                     exclude: Sequence[Replica] = ()) -> Replica:
        candidates = self._candidates(model, exclude)
        if not candidates and self._model_unknown(model):
            now = self.clock()
            if now - self._last_rediscovery >= REDISCOVER_MIN_INTERVAL:
                self._last_rediscovery = now
                await self.refresh()
                candidates = self._candidates(model, exclude)
        if candidates:
            return self._pick(candidates, affinity)
        if any(r.healthy for r in self.replicas):
            raise ModelNotFound(model)
        # Nothing is known to be up: try anyway; the attempt's error is the truthful answer.
        fallback = [r for r in self.replicas if r not in exclude] or list(self.replicas)
        return min(fallback, key=lambda r: r.in_flight)

    def _candidates(self, model: str, exclude: Sequence[Replica]) -> list[Replica]:
        return [r for r in self.replicas if r.healthy and r.serves(model) and r not in exclude]

    def _model_unknown(self, model: str) -> bool:
        return not any(r.serves(model) for r in self.replicas)

    @staticmethod
    def _pick(candidates: list[Replica], affinity: str | None) -> Replica:
        least = min(candidates, key=lambda r: r.in_flight)
        if affinity is None or len(candidates) == 1:
            return least
        # Rendezvous hashing: stable per key, and only 1/N of keys move when a replica leaves.
        target = max(
            candidates,
            key=lambda r: hashlib.blake2b(f"{affinity}|{r.url}".encode(), digest_size=8).digest(),
        )
        return target if target.in_flight <= least.in_flight + AFFINITY_SLACK else least

    async def open(self, model: str, path: str, body: bytes, *, stream: bool,
                   affinity: str | None = None) -> Call:
        """POST to a replica serving `model`. A replica that refuses the connection is marked
        down and the next one tried (nothing reached it, so nothing runs twice); at most once
        per replica. Any other failure is final."""
        tried: list[Replica] = []
        last_error: UpstreamUnreachable | None = None
        for _ in range(len(self.replicas)):
            try:
                replica = await self.choose(model, affinity=affinity, exclude=tried)
            except ModelNotFound:
                if last_error is not None:
                    raise last_error from None
                raise
            replica.in_flight += 1
            if path == GENERATION_PATH:
                note_upstream_sent(time.perf_counter())
            try:
                response = await self.upstream.post(replica.url, path, body, stream=stream)
            except UpstreamUnreachable as exc:
                replica.in_flight -= 1
                self.mark_down(replica, str(exc))
                tried.append(replica)
                last_error = exc
                continue
            except BaseException:
                replica.in_flight -= 1
                raise
            note_replica(replica.url)  # for the access log
            return Call(replica, response)
        assert last_error is not None  # the loop ran at least once: a fleet is never empty
        raise last_error

    # -- views -------------------------------------------------------------------------------
    def ready(self) -> bool:
        return any(r.healthy for r in self.replicas)

    def max_model_len(self, model: str) -> int | None:
        """The model's context length as its replicas' `/v1/models` report it (the smallest,
        so a prompt that fits fits on any of them); None when none reports one."""
        lengths = [entry["max_model_len"] for replica in self.replicas if replica.serves(model)
                   for entry in replica.models if entry.get("id") == model
                   and isinstance(entry.get("max_model_len"), int)]
        return min(lengths) if lengths else None

    def model_list(self) -> list[dict[str, Any]]:
        """Every model of every healthy replica, first occurrence wins (ids are unique)."""
        seen: dict[str, dict[str, Any]] = {}
        for replica in self.replicas:
            if replica.healthy:
                for entry in replica.models:
                    seen.setdefault(str(entry.get("id")), entry)
        return list(seen.values())

    def status(self) -> list[dict[str, Any]]:
        return [
            {"url": r.url, "healthy": r.healthy, "models": sorted(r.model_ids),
             "in_flight": r.in_flight, "error": r.error}
            for r in self.replicas
        ]
