"""The process's Prometheus metrics: one `CollectorRegistry` per app, behind a small typed API.

Every family is named here, once; callers say what happened (`response_finished`,
`cache_result`, `job_finished`, ...), never a metric name. The registry is the app's own (made
with the app, passed down with the runtime), never prometheus_client's default `REGISTRY`: tests
build several apps in one process, and each must count only its own traffic.

Rules that keep this off the hot path and bounded:
- Nothing per token: the web middleware records a request at its start, its first body bytes
  (streams) and its end; a turn adds its tokens once when it ends.
- States are read when scraped, not kept in sync by hand: replica health and in-flight from the
  fleet's own replica objects (a custom collector), the job queue's depth by one `XLEN` bounded
  by `QUEUE_READ_SECONDS` (`render`). A depth that cannot be read is left out of that scrape
  rather than shown stale.
- Labels take values from small closed sets: route templates (never raw paths: ids would make
  one series per response), methods (anything unusual is `other`), statuses, replica names from
  the configuration (never their URLs: `/metrics` is unauthenticated, and a replica's address
  is the operator's), the enumerations below. Never an id, a key, a model name from a client.

Under `serve --workers N` (`multiprocess=True`, proxy/telemetry/metricsdir.py) the samples live in
per-process files and every scrape merges them: counters and histograms sum over every process
the instance ran (a dead one's included, so they never go backwards), `proxy_open_streams`,
`proxy_upstream_in_flight` and `proxy_event_loop_tasks` sum over the live processes, and
`proxy_processes` counts them. The states read at scrape time from this process alone (replica
health, the shared queue's depth) are the same in every process. In-flight and task counts are
published to the files by each process every `PUBLISH_SECONDS` (and at each scrape).

Counters also expose prometheus_client's `*_created` samples; turning them off is a process-wide
switch of the library, which a per-app registry must not flip (the per-request families of a
process serving alone, series.py, write them as the library does by default).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, Literal, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from proxy.core.errors import ProxyError
from proxy.telemetry.series import Family

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
# The queue depth is one XLEN at scrape time; a Redis that does not answer within this leaves
# the depth out of that scrape instead of holding the scrape (Prometheus times out at 10 s).
QUEUE_READ_SECONDS = 0.5
# Multiprocess mode: how often each process writes its in-flight and task counts to its file.
PUBLISH_SECONDS = 1.0

# Buckets, in seconds, fitted to what each measures.
# Time to first byte of a stream: a cached or prefix-hit answer in milliseconds, a queued
# generation on a busy replica in tens of seconds.
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0)
# Whole requests: a GET in milliseconds, a long reasoning stream in minutes (10 at most here;
# longer ones land in +Inf).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    120.0, 300.0, 600.0)
# The proxy's own work before the upstream call: parse, history, translate, replica choice.
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                    0.25, 0.5, 1.0)
# A cache lookup: one GET, or an embedding call bounded by --cache-embedding-timeout.
CACHE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

CacheResult = Literal["hit", "miss", "bypass"]
JobOutcome = Literal["completed", "failed", "cancelled", "incomplete", "requeued"]
LimitReason = Literal["rpm", "tpm", "streams", "budget"]
JOB_OUTCOMES: tuple[JobOutcome, ...] = ("completed", "failed", "cancelled", "incomplete",
                                        "requeued")
LIMIT_REASONS: tuple[LimitReason, ...] = ("rpm", "tpm", "streams", "budget")
# Methods a label may carry; any other (a client can send any token) is counted as `other`.
METHODS = frozenset({"GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"})


class ReplicaView(Protocol):
    """What the replica collector reads from a fleet replica (services/fleet/fleet.py `Replica`)."""

    @property
    def name(self) -> str: ...
    @property
    def healthy(self) -> bool: ...
    @property
    def in_flight(self) -> int: ...


class RouteSeries:
    """One route template's HTTP series, each bound to its labels once, on its first use (a
    series appears when it first counts something, as with `labels()` at each use): what the
    front middleware (web/middleware/front.py) records per request, with no label lookup."""

    __slots__ = ("_by_status", "_duration", "_duration_child", "_open", "_open_child",
                 "_overhead", "_overhead_child", "_requests", "_ttft", "_ttft_child", "route")

    def __init__(self, route: str, requests: Any, duration: Any, ttft: Any, open_streams: Any,
                 overhead: Any) -> None:
        self.route = route
        self._requests = requests
        self._duration = duration
        self._ttft = ttft
        self._open = open_streams
        self._overhead = overhead
        # Each family's child for this route, bound on its first use and kept in a slot (a
        # lookup in a dict of them was two calls a sample, ten a stream); (method, status) ->
        # the bound request counter: methods outside METHODS share `other` and statuses are
        # three digits, so it stays small.
        self._open_child: Any = None
        self._ttft_child: Any = None
        self._overhead_child: Any = None
        self._duration_child: Any = None
        self._by_status: dict[tuple[str, int], Any] = {}

    def stream_opened(self) -> None:
        child = self._open_child
        if child is None:
            child = self._open_child = self._open.labels(self.route)
        child.inc()

    def stream_closed(self) -> None:
        child = self._open_child
        if child is None:
            child = self._open_child = self._open.labels(self.route)
        child.dec()

    def first_byte(self, seconds: float) -> None:
        child = self._ttft_child
        if child is None:
            child = self._ttft_child = self._ttft.labels(self.route)
        child.observe(seconds)

    def overhead(self, seconds: float) -> None:
        child = self._overhead_child
        if child is None:
            child = self._overhead_child = self._overhead.labels(self.route)
        child.observe(seconds)

    def finished(self, method: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else "other"
        counter = self._by_status.get((method, status))
        if counter is None:
            counter = self._by_status[(method, status)] = self._requests.labels(
                self.route, method, str(status))
        counter.inc()
        child = self._duration_child
        if child is None:
            child = self._duration_child = self._duration.labels(self.route)
        child.observe(seconds)


class Metrics:
    """`multiprocess`: the directory of the instance's sample files
    (proxy/telemetry/metricsdir.py)."""

    def __init__(self, multiprocess: str | None = None) -> None:
        # Multiprocess: the families are made in a registry never exposed (their samples go
        # to files), and the exposed one merges every process's files.
        self.multiprocess = multiprocess
        self.registry = registry = CollectorRegistry()
        if multiprocess is not None:
            MultiProcessCollector(self.registry, path=multiprocess)  # type: ignore[no-untyped-call]
            registry = CollectorRegistry()
        # The families every request counts in: in a process serving alone, kept in plain
        # numbers (series.py: a call a sample, not prometheus_client's five to seven); under
        # `--workers`, prometheus_client's, whose samples reach the shared files.
        family = _Families(registry, alone=multiprocess is None)
        # -- HTTP, per request (web/middleware/front.py) --------------------------------------
        self._requests = family.counter(
            "proxy_requests", "HTTP requests answered, by route template, method and status.",
            ("route", "method", "status"))
        self._duration = family.histogram(
            "proxy_request_duration_seconds",
            "Whole requests, start to last byte sent (a stream: to its end), by route template.",
            ("route",), DURATION_BUCKETS)
        self._ttft = family.histogram(
            "proxy_ttft_seconds",
            "Streams only: request start to the first body bytes sent to the client.",
            ("route",), TTFT_BUCKETS)
        self._open_streams = family.gauge(
            "proxy_open_streams", "SSE streams open right now, by route template.", ("route",))
        self._processes = Gauge(
            "proxy_processes", "Serving processes of this instance (`serve --workers`).",
            registry=registry, multiprocess_mode="livesum")
        self._processes.set(1)
        self._overhead = family.histogram(
            "proxy_overhead_seconds",
            "Request start to the generation request written to a replica (parse, history, "
            "translate, replica choice), by route template.",
            ("route",), OVERHEAD_BUCKETS)
        # Route templates (and `unmatched`): a closed set, so the cache is bounded.
        self._routes: dict[str, RouteSeries] = {}
        # -- Responses and tokens (services/generation/run.py) -------------------------------------
        self._responses = family.counter(
            "proxy_responses", "Responses finished, by terminal status.", ("status",))
        self._tokens = family.counter(
            "proxy_tokens", "Tokens of finished generations, by direction (input, output).",
            ("direction",))
        # -- background jobs (services/jobs/runner.py) ---------------------------------------------
        self._jobs = Counter(
            "proxy_jobs", "Background jobs ended by this process's worker, by outcome.",
            ("outcome",), registry=registry)
        # -- the response cache (services/cache/responses.py) --------------------------------------
        self._cache_requests = Counter(
            "proxy_cache_requests", "Cache lookups by route and result (hit, miss, bypass).",
            ("route", "result"), registry=registry)
        self._cache_lookup = Histogram(
            "proxy_cache_lookup_seconds", "Cache lookups (embedding included), bypasses not.",
            buckets=CACHE_BUCKETS, registry=registry)
        self._cache_hits = Counter(
            "proxy_cache_hits", "Cache hits by route and kind (exact, semantic).",
            ("route", "kind"), registry=registry)
        self._cache_writes = Counter(
            "proxy_cache_writes", "Answers kept in the cache, by route.", ("route",),
            registry=registry)
        self._embedding_errors = Counter(
            "proxy_cache_embedding_errors", "Embedding calls that failed or were too slow.",
            registry=registry)
        # -- failures and refusals ------------------------------------------------------------
        self._store_errors = Counter(
            "proxy_store_errors", "Requests answered 503 because the store was unavailable.",
            registry=registry)
        self._rate_limited = Counter(
            "proxy_rate_limited", "Requests refused for a limit, by reason.", ("reason",),
            registry=registry)
        # Enumerated labels start at 0, so a rate() has a series before the first event.
        self._input_tokens = self._tokens.labels("input")
        self._output_tokens = self._tokens.labels("output")
        self._by_outcome: dict[str, Any] = {}  # `_responses` bound by status, once each
        for outcome in JOB_OUTCOMES:
            self._jobs.labels(outcome)
        for reason in LIMIT_REASONS:
            self._rate_limited.labels(reason)
        # -- states, read at scrape time ------------------------------------------------------
        self._states = _States(per_process=multiprocess is None)
        self.registry.register(self._states)
        if multiprocess is not None:
            self._in_flight = Gauge(
                "proxy_upstream_in_flight", "Requests this instance has open on each replica.",
                ("replica",), registry=registry, multiprocess_mode="livesum")
            self._tasks = Gauge(
                "proxy_event_loop_tasks",
                "asyncio tasks alive in this instance's event loops when published.",
                registry=registry, multiprocess_mode="livesum")
            self._shortfalls = Counter(
                "proxy_redis_wait_shortfalls", "Response creates and final writes that fewer "
                "replicas acknowledged within the WAIT timeout than --redis-wait-replicas asks.",
                registry=registry)
            self._shortfalls_seen = 0

    # -- wiring (runtime.py) ---------------------------------------------------------
    def watch_replicas(self, replicas: Callable[[], Iterable[ReplicaView]]) -> None:
        self._states.replicas = replicas

    def watch_queue(self, depth: Callable[[], Awaitable[int]]) -> None:
        self._states.queue_depth = depth

    def watch_replication(self, shortfalls: Callable[[], int]) -> None:
        """The store's count of final writes fewer replicas acknowledged in time than
        `--redis-wait-replicas` asks (store/redis.py)."""
        self._states.wait_shortfalls = shortfalls

    # -- HTTP ---------------------------------------------------------------------------------
    def route(self, route: str) -> RouteSeries:
        """The series of one route template, bound to their labels once each (a `labels()`
        call builds its key, and takes prometheus_client's lock under `--workers`: five per
        request)."""
        series = self._routes.get(route)
        if series is None:
            series = self._routes[route] = RouteSeries(
                route, self._requests, self._duration, self._ttft, self._open_streams,
                self._overhead)
        return series

    # -- services -----------------------------------------------------------------------------
    def response_finished(self, status: str, input_tokens: int = 0,
                          output_tokens: int = 0) -> None:
        """Once per Response, when it ends; the tokens are those the fleet processed for it."""
        counter = self._by_outcome.get(status)
        if counter is None:  # terminal statuses: a closed set
            counter = self._by_outcome[status] = self._responses.labels(status)
        counter.inc()
        if input_tokens:
            self._input_tokens.inc(input_tokens)
        if output_tokens:
            self._output_tokens.inc(output_tokens)

    def job_finished(self, outcome: JobOutcome) -> None:
        self._jobs.labels(outcome).inc()

    def cache_result(self, route: str, result: CacheResult,
                     seconds: float | None = None) -> None:
        """One lookup's result; `seconds` when a lookup ran (a bypass has none)."""
        self._cache_requests.labels(route, result).inc()
        if seconds is not None:
            self._cache_lookup.observe(seconds)

    def cache_hit(self, route: str, kind: Literal["exact", "semantic"]) -> None:
        self._cache_hits.labels(route, kind).inc()

    def cache_write(self, route: str) -> None:
        self._cache_writes.labels(route).inc()

    def cache_embedding_error(self) -> None:
        self._embedding_errors.inc()

    def store_error(self) -> None:
        self._store_errors.inc()

    def rate_limited(self, reason: LimitReason) -> None:
        self._rate_limited.labels(reason).inc()

    # -- exposition ---------------------------------------------------------------------------
    async def render(self) -> bytes:
        """The text exposition; the queue depth is read first (bounded), then everything at
        once, synchronously, so two concurrent scrapes cannot mix their depths."""
        self._states.depth = await self._states.read_depth()
        self._states.tasks = len(asyncio.all_tasks())
        self.publish()
        return generate_latest(self.registry)

    def publish(self) -> None:
        """Multiprocess: this process's in-flight and task counts, and its new WAIT
        shortfalls, into its file (a dict walk; nothing on the request path)."""
        if self.multiprocess is None:
            return
        for replica in self._states.replicas():
            self._in_flight.labels(replica.name).set(replica.in_flight)
        self._tasks.set(len(asyncio.all_tasks()))
        seen = self._states.wait_shortfalls()
        if seen > self._shortfalls_seen:
            self._shortfalls.inc(seen - self._shortfalls_seen)
            self._shortfalls_seen = seen

    async def publish_loop(self) -> None:
        while True:
            await asyncio.sleep(PUBLISH_SECONDS)
            self.publish()

    def value(self, name: str, **labels: str) -> float:
        """One sample's current value (0 when absent), e.g. for tests and diagnostics. Reads
        the whole registry: not for a request path."""
        found = self.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found


class _States:
    """A custom collector: replica health and in-flight, and the job queue's depth, as they are
    when scraped. Nothing here is updated by the request path."""

    def __init__(self, *, per_process: bool = True) -> None:
        # False (multiprocess): in-flight, tasks and shortfalls come from the files instead.
        self.per_process = per_process
        self.replicas: Callable[[], Iterable[ReplicaView]] = _no_replicas
        self.queue_depth: Callable[[], Awaitable[int]] | None = None
        self.depth: int | None = None  # read by `Metrics.render` just before a collection
        self.tasks: int | None = None  # the event loop's tasks, counted by `Metrics.render`
        self.wait_shortfalls: Callable[[], int] = lambda: 0

    async def read_depth(self) -> int | None:
        read = self.queue_depth
        if read is None:
            return None
        try:
            async with asyncio.timeout(QUEUE_READ_SECONDS):
                return await read()
        except (TimeoutError, ProxyError):  # the store down or slow: no sample this scrape
            return None

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        up, in_flight, queued, tasks = self._families()
        for replica in self.replicas():
            up.add_metric([replica.name], 1.0 if replica.healthy else 0.0)
            in_flight.add_metric([replica.name], float(replica.in_flight))
        if self.depth is not None:
            queued.add_metric([], float(self.depth))
        if self.tasks is not None:
            tasks.add_metric([], float(self.tasks))
        if not self.per_process:
            yield from (up, queued)
            return
        yield from (up, in_flight, queued, tasks)
        shortfalls = CounterMetricFamily(
            "proxy_redis_wait_shortfalls",
            "Response creates and final writes that fewer replicas acknowledged within the "
            "WAIT timeout than "
            "--redis-wait-replicas asks (the write holds on the primary; a failover now could "
            "lose it).", labels=())
        shortfalls.add_metric([], float(self.wait_shortfalls()))
        yield shortfalls

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily("proxy_upstream_up", "Replica health: 1 healthy, 0 down.",
                              labels=("replica",)),
            GaugeMetricFamily("proxy_upstream_in_flight",
                              "Requests this process has open on each replica.",
                              labels=("replica",)),
            GaugeMetricFamily("proxy_jobs_queued",
                              "Background jobs in the shared queue, queued + running (XLEN); "
                              "the same on every instance: aggregate with max().",
                              labels=()),
            # A leak shows here first (the soak watches it): tasks that outlive their request.
            GaugeMetricFamily("proxy_event_loop_tasks",
                              "asyncio tasks alive in this process's event loop when scraped.",
                              labels=()),
        )


def _no_replicas() -> Iterable[ReplicaView]:
    return ()


class _Families:
    """The per-request families' makers: `Family` (series.py) when the process serves alone,
    else prometheus_client's (their samples go to the shared files). Either's children take
    `inc`, `dec`, `observe` as the family's kind does; typed `Any` for that."""

    def __init__(self, registry: CollectorRegistry, *, alone: bool) -> None:
        self.registry = registry
        self.alone = alone

    def counter(self, name: str, documentation: str, labelnames: tuple[str, ...]) -> Any:
        if self.alone:
            return Family("counter", name, documentation, labelnames, registry=self.registry)
        return Counter(name, documentation, labelnames, registry=self.registry)

    def gauge(self, name: str, documentation: str, labelnames: tuple[str, ...]) -> Any:
        """A gauge summed over the live processes under `--workers` (`livesum`)."""
        if self.alone:
            return Family("gauge", name, documentation, labelnames, registry=self.registry)
        return Gauge(name, documentation, labelnames, registry=self.registry,
                     multiprocess_mode="livesum")

    def histogram(self, name: str, documentation: str, labelnames: tuple[str, ...],
                  buckets: tuple[float, ...]) -> Any:
        if self.alone:
            return Family("histogram", name, documentation, labelnames, buckets=buckets,
                          registry=self.registry)
        return Histogram(name, documentation, labelnames, buckets=buckets,
                         registry=self.registry)
