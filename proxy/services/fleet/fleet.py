"""The fleet: which vLLM replicas exist, which are healthy, which models each serves, and which
one takes the next request.

Health, models and load are hints refreshed in the background (`/health`, `/v1/models` and
`/metrics` every `discovery_interval`, within the probe timeout); a replica that refuses a
connection is marked down at once. A replica without `/metrics` (or with nothing vLLM-like in
it) counts only this process's requests. The choice among healthy replicas serving the model is
core/fleet/balancer.py's pure function (its docstring states the load formula and the bound): the
recorded replica of a chain (`home`), else the affinity key's rendezvous order, within the bounded
load; else the least loaded, ties rotating. When nothing is known to be healthy we still try a
replica: the failure then tells the client what is wrong (502), instead of a guess.

Replicas come from `--upstream` URLs or a fleet file (settings/fleetfile.py: weight, per-replica
API key, max concurrency, a fixed model list). The per-replica key goes to the upstream client
only; it is never logged nor shown in `status()`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span

from proxy.core.context.requestctx import note_replica, note_upstream_sent
from proxy.core.errors import (
    AutoToolChoiceUnavailable,
    ModelNotFound,
    ProxyError,
    UpstreamUnreachable,
)
from proxy.core.fleet import balancer, replicaload
from proxy.core.fleet.routing import baseline
from proxy.core.translate.effort import SCALE, both, model_efforts, version_efforts
from proxy.settings.fleetfile import ReplicaSpec
from proxy.telemetry.tracing import Tracing, end_span, traceparent, tracestate
from proxy.upstream.client import Response, Upstream, map_transport_errors, transport_detail

log = logging.getLogger("proxy.fleet")

# How far above the fleet's mean load (per unit of weight) an affinity target may go before
# its keys shed to their fallback (`--affinity-load-factor`).
DEFAULT_LOAD_FACTOR = 1.25
# /metrics text read at most this far (vLLM's is tens of kB; the gauges come first anyway).
METRICS_MAX_BYTES = 1 << 20
# Probes that must fail in a row before a replica that answered before is marked down.
PROBES_TO_DOWN = 2
# On-demand re-discovery (an unknown model may have just been loaded) at most this often.
REDISCOVER_MIN_INTERVAL = 2.0
# The generation call: where a request's time inside the proxy ends (`proxy_overhead_seconds`).
# Preparatory calls (/tokenize for truncation, /v1/embeddings for the semantic cache) count as
# the proxy's work, since the client waits for them before generation starts.
CHAT_PATH = "/v1/chat/completions"
# How `tool_choice: "auto"` reads in the bodies we send (orjson: no spaces).
AUTO_CHOICE = b'"tool_choice":"auto"'


@dataclass
class Replica:
    url: str
    # What the public /metrics shows: the fleet file's `name`, else `replica-<n>` (its position
    # in the configuration, from 1). The URL stays in the logs and the keyed /readyz.
    name: str = ""
    healthy: bool = False
    known: bool = False  # answered /v1/models at least once
    models: tuple[dict[str, Any], ...] = ()
    model_ids: frozenset[str] = frozenset()
    in_flight: int = 0
    error: str | None = None
    checked_at: float = 0.0
    failed_probes: int = 0  # in a row
    weight: float = 1.0  # share of un-keyed traffic and of the load bound
    max_concurrency: int | None = None  # the fleet file's cap (flow control reads it)
    allowed: frozenset[str] | None = None  # the fleet file's `models`: only these, ever
    signal: replicaload.Signal | None = None  # the last /metrics scrape (None: no signal)
    picks: int = 0  # requests this process sent it: the balancer's tie-breaker
    efforts: tuple[str, ...] | None = None  # the fleet file's `reasoning_efforts`
    # What its vLLM version validates for every model (read from `/version` when it comes up;
    # core/translate/effort.py `version_efforts`). None: no limit known.
    version_efforts: tuple[str, ...] | None = None
    # False once it refused `tool_choice: "auto"` (started without --enable-auto-tool-choice):
    # such requests go to the others first. None: not known.
    auto_tools: bool | None = None
    version: str | None = None  # its `/version` when it last came up (the console shows it)

    def serves(self, model: str) -> bool:
        return model in self.model_ids

    @property
    def load(self) -> float:
        return replicaload.load(self.in_flight, self.signal)

    @classmethod
    def of(cls, spec: ReplicaSpec) -> Replica:
        allowed = frozenset(spec.models) if spec.models is not None else None
        # A fixed model list is served from the start, before discovery confirms it.
        return cls(spec.url, spec.name or "", weight=spec.weight,
                   max_concurrency=spec.max_concurrency, allowed=allowed,
                   model_ids=allowed or frozenset(), efforts=spec.reasoning_efforts)


@dataclass
class Call:
    """One open upstream response and the replica lease it holds; `aclose()` ends both."""

    replica: Replica
    response: Response
    _closed: bool = False
    span: Span | None = None  # the call's span (tracing on), ended with the call

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self.replica.in_flight -= 1
            if self.span is not None:
                self.span.end()
            await self.response.aclose()

    async def read_all(self) -> bytes:
        """A non-streamed answer's whole body (transport errors mapped, as on every upstream
        read), the call closed after it either way."""
        try:
            with map_transport_errors(self.replica.url):
                return await self.response.aread()
        finally:
            await self.aclose()


@dataclass
class Fleet:
    upstream: Upstream
    urls: Sequence[str]
    interval: float = 10.0
    probe_timeout: float = 5.0
    clock: Callable[[], float] = time.monotonic
    # The fleet file's replicas; when given, they are the fleet and `urls` is not used.
    specs: Sequence[ReplicaSpec] = ()
    load_factor: float = DEFAULT_LOAD_FACTOR
    routing: str = "affinity"  # or a baseline of core/fleet/routing.py (`--routing`, benchmarks)
    tracing: Tracing | None = None  # None: tracing off (proxy/telemetry/tracing.py)
    replicas: list[Replica] = field(init=False)
    _turn: int = field(init=False, default=0)
    _last_rediscovery: float = field(init=False, default=-1e9)

    def __post_init__(self) -> None:
        if self.specs:
            self.replicas = [Replica.of(spec) for spec in self.specs]
            for spec in self.specs:
                if spec.api_key:
                    self.upstream.use_key(spec.url, spec.api_key)
        else:
            self.replicas = [Replica(url) for url in self.urls]
        for index, replica in enumerate(self.replicas, start=1):
            replica.name = replica.name or f"replica-{index}"

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
            reason = transport_detail(exc)  # the operator's words (logs, keyed /readyz)
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
            if replica.allowed is not None:
                models = tuple(m for m in models if str(m.get("id")) in replica.allowed)
            if not replica.healthy:
                log.info("replica %s is up, serving %d model(s)", replica.url, len(models))
                self._level_picks(replica)
                # read when it (re)starts: an upgrade comes back as a down-then-up replica
                replica.version = await self._version(replica)
                replica.version_efforts = version_efforts(replica.version)
            replica.healthy, replica.known, replica.error = True, True, None
            replica.models = models
            replica.model_ids = frozenset(str(m.get("id")) for m in models)
            replica.signal = await self._scrape(replica)
        replica.checked_at = self.clock()

    async def _version(self, replica: Replica) -> str | None:
        """The replica's `/version` (vLLM: `{"version": "0.10.1"}`); None when it gives none."""
        try:
            async with asyncio.timeout(self.probe_timeout):
                answer = await self.upstream.get_json(replica.url, "/version",
                                                      timeout=self.probe_timeout)
        except (ProxyError, TimeoutError):
            return None
        version = answer.get("version") if isinstance(answer, dict) else None
        return version if isinstance(version, str) else None

    async def _scrape(self, replica: Replica) -> replicaload.Signal | None:
        """The replica's load gauges from its `/metrics`; None when it has none to give."""
        own = replica.in_flight
        try:
            async with asyncio.timeout(self.probe_timeout):
                response = await self.upstream.get(replica.url, "/metrics",
                                                   timeout=self.probe_timeout)
        except (ProxyError, TimeoutError):
            return None
        text = response.content[:METRICS_MAX_BYTES].decode("utf-8", "replace")
        return replicaload.parse_signal(text, own)

    def _level_picks(self, replica: Replica) -> None:
        """A replica (back) up starts level with the others' picks per unit of weight, so the
        tie-breaker does not send it every tied request until it has caught up."""
        ratios = [r.picks / r.weight for r in self.replicas if r.healthy and r is not replica]
        replica.picks = int(min(ratios, default=0.0) * replica.weight)

    async def run(self) -> None:
        """Re-probe forever (a lifespan task; cancelled at shutdown)."""
        while True:
            await asyncio.sleep(self.interval)
            await self.refresh()

    def mark_down(self, replica: Replica, reason: str) -> None:
        replica.healthy = False
        replica.error = reason

    # -- choice ------------------------------------------------------------------------------
    async def choose(self, model: str, *, affinity: str | None = None, home: str | None = None,
                     exclude: Sequence[Replica] = ()) -> Replica:
        """`affinity`: the request's key; `home`: the URL of the replica that ran the response
        it follows (it goes there first, see core/fleet/balancer.py)."""
        candidates = self._candidates(model, exclude)
        if not candidates and self._model_unknown(model):
            now = self.clock()
            if now - self._last_rediscovery >= REDISCOVER_MIN_INTERVAL:
                self._last_rediscovery = now
                await self.refresh()
                candidates = self._candidates(model, exclude)
        if candidates:
            if self.routing != "affinity":
                self._turn += 1
                return candidates[baseline(self.routing, [r.in_flight for r in candidates],
                                           self._turn)]
            return self._pick(candidates, affinity, home)
        if any(r.healthy for r in self.replicas):
            raise ModelNotFound(model)
        # Nothing is known to be up: try anyway; the attempt's error is the truthful answer.
        fallback = [r for r in self.replicas if r not in exclude] or list(self.replicas)
        return min(fallback, key=lambda r: r.in_flight)

    def efforts(self, model: str) -> tuple[str, ...] | None:
        """The `reasoning.effort` values every replica that may serve `model` takes (its fleet
        file's `reasoning_efforts`, else the model's default table): a request is translated
        before its replica is chosen (and may be retried on another), so its effort must suit
        any of them. None: any value goes as is."""
        default = model_efforts(model)
        tables = [r.efforts or both(default, r.version_efforts)
                  for r in self.replicas if r.serves(model)] or [default]
        known = [t for t in tables if t is not None]
        if not known:
            return None
        return tuple(e for e in SCALE if all(e in t for t in known)) or known[0]

    def _candidates(self, model: str, exclude: Sequence[Replica]) -> list[Replica]:
        return [r for r in self.replicas if r.healthy and r.serves(model) and r not in exclude]

    def _model_unknown(self, model: str) -> bool:
        return not any(r.serves(model) for r in self.replicas)

    def _pick(self, candidates: list[Replica], affinity: str | None,
              home: str | None) -> Replica:
        if len(candidates) == 1:  # the only one is the choice, whatever the key (~2-4 µs)
            self._turn += 1
            return candidates[0]
        states = [balancer.Candidate(r.url, r.load, r.weight, r.picks) for r in candidates]
        chosen = balancer.choose(states, key=affinity, home=home, factor=self.load_factor,
                                 turn=self._turn)
        self._turn += 1
        return next(r for r, s in zip(candidates, states, strict=True) if s is chosen)

    async def open(self, model: str, path: str, body: bytes, *, stream: bool,
                   affinity: str | None = None, home: str | None = None) -> Call:
        """POST to a replica serving `model`. A replica that refuses the connection is marked
        down and the next one tried (nothing reached it, so nothing runs twice); at most once
        per replica. So is one that refuses `tool_choice: "auto"` (vLLM checks it before it
        generates), remembered: such requests skip it from then on. Any other failure is
        final."""
        tried: list[Replica] = []
        # Our bodies are compact JSON (a client's may take one refusal). When every replica of
        # the model refused, they are asked again: one may have been restarted with the flag.
        # `find`, not `in`: CPython 3.11's `bytes in bytes` first tries the left side as an
        # integer and makes and drops a TypeError (~2k instructions) each time.
        auto = body.find(AUTO_CHOICE) != -1
        if auto and any(r.serves(model) and r.auto_tools is not False for r in self.replicas):
            tried = [r for r in self.replicas if r.auto_tools is False]
        last_error: UpstreamUnreachable | AutoToolChoiceUnavailable | None = None
        for _ in range(len(self.replicas)):
            try:
                replica = await self.choose(model, affinity=affinity, home=home, exclude=tried)
            except ModelNotFound:
                if last_error is not None:
                    raise last_error from None
                raise
            replica.in_flight += 1
            if path == CHAT_PATH:
                note_upstream_sent(time.perf_counter())
            try:
                if self.tracing is None:
                    response = await self.upstream.post(replica.url, path, body, stream=stream)
                    span = None
                else:
                    response, span = await self._traced_post(self.tracing, replica, model,
                                                             path, body, stream)
            except UpstreamUnreachable as exc:
                replica.in_flight -= 1
                self.mark_down(replica, transport_detail(exc))
                tried.append(replica)
                last_error = exc
                continue
            except AutoToolChoiceUnavailable as exc:  # refused before generating: try others
                replica.in_flight -= 1
                if replica.auto_tools is not False:
                    log.warning("replica %s refuses tool_choice auto: start it with "
                                "--enable-auto-tool-choice and --tool-call-parser", replica.url)
                replica.auto_tools = False
                tried.append(replica)
                last_error = exc
                continue
            except BaseException:
                replica.in_flight -= 1
                raise
            if auto:
                replica.auto_tools = True
            note_replica(replica.url)  # for the access log
            replica.picks += 1
            return Call(replica, response, span=span)
        assert last_error is not None  # the loop ran at least once: a fleet is never empty
        raise last_error

    async def _traced_post(self, tracing: Tracing, replica: Replica, model: str, path: str,
                           body: bytes, stream: bool) -> tuple[Response, Span]:
        """The POST inside a span of its own, whose `traceparent` goes with it (the replica
        joins the trace). A failed attempt ends its span; an answered one's lives in its
        `Call`, which ends it."""
        operation = "chat" if path == CHAT_PATH else path.rsplit("/", 1)[-1]
        span = tracing.upstream_span(replica.name, replica.url, model, operation)
        try:
            response = await self.upstream.post(replica.url, path, body, stream=stream,
                                                 traceparent=traceparent(span),
                                                 tracestate=tracestate(span))
        except BaseException as exc:
            end_span(span, exc)
            raise
        return response, span

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
            {"name": r.name, "url": r.url, "healthy": r.healthy, "models": sorted(r.model_ids),
             "in_flight": r.in_flight, "error": r.error, "load": round(r.load, 3),
             "weight": r.weight, "max_concurrency": r.max_concurrency,
             "auto_tool_choice": r.auto_tools,
             "metrics": None if r.signal is None else
             {"running": r.signal.running, "waiting": r.signal.waiting,
              "kv_cache_usage": r.signal.kv_usage}}
            for r in self.replicas
        ]
