"""Everything one process runs with, built once in the app's lifespan and passed down.

No globals: a test builds its own `Runtime` with another store or upstream. `start()` runs the
first fleet discovery (so the first request knows the models) and starts the background loops;
`aclose()` ends things in the reverse order of their dependencies: the worker (its jobs still
write), then the tasks that finish streams, then the log writer and readers, then the store and
the HTTP client.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from proxy.core.errors import ProxyError
from proxy.core.hosted import CODE_INTERPRETER
from proxy.core.policy.keyslots import KeySlots
from proxy.core.policy.storagebudget import StorageBudget
from proxy.core.policy.tenancy import CacheSalts
from proxy.core.seal import Sealer
from proxy.services.admin.console import Console
from proxy.services.admin.keyring import KeyRing, KeyTables, budgets_view, keyring_of
from proxy.services.admin.usage import Usage
from proxy.services.cache.chat import CachedChat
from proxy.services.cache.responses import ResponseCache
from proxy.services.eventlog.log import EventLog
from proxy.services.eventlog.ownership import Leases
from proxy.services.files.extraction import Extractor
from proxy.services.files.files import Files
from proxy.services.fleet.admission import Admission
from proxy.services.fleet.embeddings import Embedder
from proxy.services.fleet.fleet import Fleet
from proxy.services.fleet.gateway import Gateway
from proxy.services.fleet.media import MediaFetcher
from proxy.services.fleet.passthrough import Passthrough
from proxy.services.fleet.setups import SetupGate
from proxy.services.generation.builder import Generations
from proxy.services.jobs.background import Background
from proxy.services.jobs.runner import Worker, worker_name
from proxy.services.jobs.shares import QueueShare
from proxy.services.metering.embedding import EmbeddingAccounts
from proxy.services.metering.limits import Limiter, limit_table
from proxy.services.process.drain import Drain
from proxy.services.process.loops import LoopSupervisor, TaskSet
from proxy.services.process.sealing import fleet_sealer, keep_reading
from proxy.services.responses.conversations import Conversations
from proxy.services.responses.create import ResponsesService
from proxy.services.responses.inputs import RequestInputs
from proxy.services.responses.prompts import Prompts
from proxy.services.responses.stored import StoredResponses
from proxy.services.tools.filesearch import FileSearch
from proxy.services.tools.hosted import HostedTools
from proxy.services.tools.mcpclient import McpClient
from proxy.services.tools.mcphosted import McpHostedTool
from proxy.services.tools.websearch import WebSearch
from proxy.services.vectors.ingest import Ingester
from proxy.services.vectors.search import Searcher
from proxy.services.vectors.stores import VectorStores
from proxy.settings import Settings, load_keys_file
from proxy.settings.groups import StreamSettings
from proxy.store.apikeys import ManagedKeyStore
from proxy.store.base import JobQueue, Store
from proxy.store.connection.factory import Backend, open_backend
from proxy.telemetry.metrics import Metrics
from proxy.telemetry.tracing import Tracing, traced_writes
from proxy.upstream.client import ConnectionPool, Upstream
from proxy.web.state import WebState

log = logging.getLogger("proxy")

# Seconds that in-flight finishing work (final writes, upstream closes) gets at shutdown.
DRAIN_SECONDS = 5.0
# Connections of the process's one upstream pool, at least (twice the per-replica bound when
# that is larger): several replicas each at their bound, and a hung one holds only its own.
POOL_CONNECTIONS = 4096


@dataclass(frozen=True)
class Services:
    """What the transports (web/) hand requests to."""

    responses: ResponsesService
    stored: StoredResponses
    conversations: Conversations
    passthrough: Passthrough
    background: Background
    files: Files  # `/v1/files`
    prompts: Prompts  # `/v1/prompts`
    vector_stores: VectorStores  # `/v1/vector_stores`
    console: Console  # the operator's reads (`/admin/fleet`, `/admin/jobs`, a response)
    usage: Usage  # a key's usage (`/v1/usage`, the admin key list)
    chat: CachedChat | None = None  # chat completions through the cache (when it is on)


@dataclass
class Process:
    """What keeps this process running and what its shutdown closes."""

    http: ConnectionPool  # the upstream connection pool, closed last
    tasks: TaskSet
    # Restarts the background loops; /readyz reports the ones failing.
    supervisor: LoopSupervisor = field(default_factory=LoopSupervisor)
    # SIGTERM's drain: readiness, refusal of new requests, the foreground turns (drain.py).
    draining: Drain = field(default_factory=Drain)
    worker: Worker | None = None
    # Per-key limits (`--keys-file`); `limits.active` is False when no key has any.
    limits: Limiter | None = None
    # Leases on the stored foreground responses this process generates (None: embedded store,
    # which dies with the process anyway).
    leases: Leases | None = None
    # Reads the deployment's fleet secret when the store was unreachable at start (None: it
    # is known; services/process/sealing.py).
    read_secret: Callable[[], Awaitable[None]] | None = None
    loops: list[asyncio.Task[None]] = field(default_factory=list)
    # WebSocket connections open per key in this process (`--ws-max-connections-per-key`).
    sockets: KeySlots = field(default_factory=lambda: KeySlots(StreamSettings.ws_max_per_key))
    # Every accepted client key and its limits, the managed ones kept current from the store.
    keys: KeyRing = field(default_factory=KeyRing)


@dataclass
class Runtime:
    """The composition root: everything the lifespan builds, in three groups (the state
    adapters, the services the transports call, the process's own machinery). Built in steps,
    one per room: the upstream and the fleet (`_fleet`), the store's adapters as the services
    use them (`_store_wiring`), the services (`_services_wiring`), and what the web layer
    reads (`web_state`)."""

    settings: Settings
    metrics: Metrics
    fleet: Fleet
    store: Store
    queue: JobQueue
    events: EventLog  # the event logs: writer, followers, reads, ending (services/eventlog/log.py)
    services: Services
    process: Process

    @classmethod
    async def open(cls, settings: Settings, *, worker: bool | None = None,
                   metrics: Metrics | None = None, draining: Drain | None = None,
                   tracing: Tracing | None = None, keys: KeyRing | None = None) -> Runtime:
        """`build` with the store opened and the fleet secret read from it first (the one
        piece of start-up I/O the services need before they exist: services/process/sealing.py).
        `keys`: the app's (web/middleware/auth.py reads it too); made from the settings when
        None."""
        keys = keys or keyring_of(settings.tenancy)
        # The store reads each key's budget at each write it checks: the live view.
        budget = StorageBudget(keys.tables.stored_default, budgets_view(keys))
        backend = open_backend(settings.store.redis_url, budget=budget,
                               wait_replicas=settings.store.wait_replicas,
                               compact_log=settings.store.event_log_format == "compact")
        sealer = await fleet_sealer(settings.sealing, backend.secret, shared=backend.shared)
        return cls.build(settings, backend, sealer, worker=worker, metrics=metrics,
                         draining=draining, tracing=tracing, keys=keys)

    @classmethod
    def build(cls, settings: Settings, backend: Backend, sealer: Sealer, *,
              http: ConnectionPool | None = None, worker: bool | None = None,
              metrics: Metrics | None = None, draining: Drain | None = None,
              tracing: Tracing | None = None, keys: KeyRing | None = None) -> Runtime:
        """`worker`: run background jobs in this process (default: `settings.jobs.run`).
        `sealer`: the fleet secret's (services/process/sealing.py), one for every service.
        `backend`: the store and its adapters (store/connection/factory.py), used only through
        them."""
        metrics = metrics or Metrics()
        process = Process(http=http or _pool(settings), tasks=TaskSet(),
                          draining=draining or Drain(),
                          sockets=KeySlots(settings.streams.ws_max_per_key),
                          keys=keys or keyring_of(settings.tenancy))
        fleet = _fleet(settings, process.http, tracing)
        events, process.leases = _store_wiring(settings, backend, fleet, metrics, process,
                                               tracing)
        wiring = _Wiring(settings, backend, sealer, fleet, events, metrics, process, tracing)
        services, process.limits, process.worker = _services_wiring(
            wiring, settings.jobs.run if worker is None else worker)
        if not sealer.ready:
            process.read_secret = functools.partial(keep_reading, sealer, backend.secret)
        return cls(settings=settings, metrics=metrics, fleet=fleet, store=backend.store,
                   queue=backend.queue, events=events, services=services, process=process)

    def web_state(self) -> WebState:
        """What the routes, sockets and error handlers read (web/state.py), and nothing more."""
        services, process, settings = self.services, self.process, self.settings
        return WebState(
            responses=services.responses, stored=services.stored,
            background=services.background, conversations=services.conversations,
            passthrough=services.passthrough, chat=services.chat, files=services.files,
            prompts=services.prompts, vector_stores=services.vector_stores,
            console=services.console, usage=services.usage,
            fleet=self.fleet, store=self.store, draining=process.draining,
            supervisor=process.supervisor, metrics=self.metrics,
            keys=process.keys, limiter=process.limits, sockets=process.sockets,
            streams=settings.streams, limits=settings.limits, tenancy=settings.tenancy)

    async def start(self) -> None:
        await self.process.keys.load()  # a key both managed and in the keys file: no start
        self._on_sighup(lambda: self.process.keys.reload_file(load_keys_file))
        await self.fleet.refresh()
        for replica in self.fleet.replicas:
            if not replica.healthy:
                log.warning("replica %s not reachable at start: %s", replica.url, replica.error)
        process = self.process
        loops = [("fleet-discovery", self.fleet.run), ("fleet-secret", process.read_secret),
                 ("leases", process.leases.run if process.leases is not None else None),
                 # Renews the stream leases of this process's streams and background jobs.
                 ("limit-leases", process.limits.run if process.limits is not None else None),
                 # Keys created, changed or revoked on any instance (services/admin/keyring.py).
                 ("keys", process.keys.run if process.keys.store is not None else None),
                 # `serve --workers N`: this process's gauges into the instance's files.
                 ("metrics-publish", self.metrics.publish_loop
                  if self.metrics.multiprocess is not None else None)]
        for name, loop in loops:
            if loop is not None:
                process.loops.append(process.supervisor.start(name, loop))
        if process.worker is not None:
            process.worker.start()

    def _on_sighup(self, reload: Callable[[], object] | None) -> None:
        """SIGHUP reads the keys file again (`--keys-file`; prefork.py forwards it to every
        process). Only where a loop may own signals (the main thread) and a file was given."""
        keys_file = self.settings.tenancy.keys_file
        if keys_file is None or keys_file.source is None:
            return
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop = asyncio.get_running_loop()
            if reload is None:
                loop.remove_signal_handler(signal.SIGHUP)
            else:
                loop.add_signal_handler(signal.SIGHUP, reload)

    async def drain(self) -> None:
        """SIGTERM (process/server.py): drain within `--shutdown-grace`, then the server closes."""
        worker_stop = (self.process.worker.stop(self.settings.server.shutdown_grace)
                       if self.process.worker is not None else None)
        await self.process.draining.run(self.settings.server.shutdown_grace, worker_stop)

    async def aclose(self) -> None:
        self._on_sighup(None)
        if self.process.worker is not None:
            await self.process.worker.stop(self.settings.server.shutdown_grace)
        for loop in self.process.loops:
            loop.cancel()
        for loop in self.process.loops:
            with contextlib.suppress(asyncio.CancelledError):
                await loop
        await self.process.tasks.drain(DRAIN_SECONDS)
        if self.process.leases is not None:
            with contextlib.suppress(ProxyError):
                await self.process.leases.renew()  # drops the leases of the turns that just ended
        await self.events.aclose()
        await self.store.aclose()
        await self.process.http.aclose()
        await self.services.files.extractor.aclose()  # its children, idle by now


@dataclass(frozen=True)
class _Wiring:
    """What every step of the services' wiring may draw on: the settings, the store's adapters
    (wired), the fleet, the process's parts. Local to the composition root: each service is
    handed only the parts it uses."""

    settings: Settings
    backend: Backend
    sealer: Sealer
    fleet: Fleet
    events: EventLog
    metrics: Metrics
    process: Process
    tracing: Tracing | None


@dataclass(frozen=True)
class _Documents:
    extractor: Extractor
    files: Files
    searcher: Searcher
    vector_stores: VectorStores
    ingester: Ingester


def _pool(settings: Settings) -> ConnectionPool:
    upstream = settings.upstream
    return Upstream.make_pool(
        max_connections=max(POOL_CONNECTIONS, 2 * upstream.max_connections),
        max_per_origin=upstream.max_connections, ca_bundle=upstream.ca_bundle,
        https_proxy=upstream.https_proxy, no_proxy=upstream.no_proxy)


def _fleet(settings: Settings, client: ConnectionPool, tracing: Tracing | None) -> Fleet:
    upstream = Upstream(client, api_key=settings.upstream.api_key, timeouts=settings.timeouts)
    fleet = settings.fleet
    return Fleet(upstream, fleet.upstreams, interval=fleet.discovery_interval,
                 probe_timeout=min(5.0, settings.timeouts.connect + 2.0), specs=fleet.replicas,
                 load_factor=fleet.affinity_load_factor, routing=fleet.routing, tracing=tracing)


def _store_wiring(settings: Settings, backend: Backend, fleet: Fleet, metrics: Metrics,
                  process: Process, tracing: Tracing | None) -> tuple[EventLog, Leases | None]:
    """The store's adapters as the services use them: the event logs over the store, the
    leases on stored responses, writes traced, and the states `/metrics` reads."""
    # Read when /metrics is scraped, never kept in sync by the request path.
    metrics.watch_replicas(lambda: fleet.replicas)
    metrics.watch_queue(backend.queue.length)
    metrics.watch_replication(lambda: backend.store.replication.shortfalls)
    # Their writes traced (a span each, tracing on): uploads, vector stores, ingestions.
    traced_writes(tracing, backend.files, {"put": "put_file", "delete": "delete_file"})
    traced_writes(tracing, backend.vectors, {
        "create": "create_vector_store", "renew": "renew_vector_store",
        "delete": "delete_vector_store", "add_files": "add_vector_store_files",
        "finish_file": "finish_vector_store_file",
        "delete_file": "delete_vector_store_file"})
    store = settings.store
    events = EventLog(backend.store, ttl=store.response_ttl, event_ttl=store.event_ttl,
                      supervisor=process.supervisor, tracing=tracing)
    leases = None if backend.leases is None else Leases(
        backend.leases, events, ttl=store.lease_ttl, owner=worker_name(),
        interrupt=process.draining.interrupt)
    return events, leases


def _services_wiring(w: _Wiring, run_jobs: bool) -> tuple[Services, Limiter, Worker | None]:
    """The services, each handed its collaborators and settings groups; with the limiter and
    this process's worker (`run_jobs`), which the process runs and stops."""
    settings, backend, process = w.settings, w.backend, w.process
    # Always built (no I/O until used): jobs of limited keys may come from other instances.
    limits = Limiter(backend.limits,
                     limit_table(settings.tenancy.keys_file, settings.tenancy.api_keys),
                     refused=w.metrics.rate_limited)
    # Every embedding (vector stores, the semantic cache) is charged to its key.
    accounts = EmbeddingAccounts(limits)
    documents = _documents(w, accounts)
    admission, generations = _generation(w, documents.searcher)
    salts = CacheSalts.of(settings.tenancy.keys_file)
    _keys_wired(process.keys, backend, limits, admission, salts)
    runner = Worker(backend.queue, generations, settings.jobs, ttl=settings.store.response_ttl,
                    shared=backend.shared, supervisor=process.supervisor, limits=limits,
                    ingest=documents.ingester.run) if run_jobs else None
    # This process's own worker, if any, is told of its submits and cancels at once.
    background = Background(backend.store, backend.queue, settings.store, settings.jobs,
                            worker=runner)
    stored = StoredResponses(backend.store, w.events.followers, settings.streams,
                             leases=process.leases)
    return _front(w, generations, documents, background, stored, limits, salts,
                  _cache(w, accounts)), limits, runner


def _front(w: _Wiring, generations: Generations, documents: _Documents,
           background: Background, stored: StoredResponses, limits: Limiter,
           salts: CacheSalts, cache: ResponseCache | None) -> Services:
    """The services the transports call, over the generation, documents and jobs wired."""
    settings, backend, process = w.settings, w.backend, w.process
    # The process's one fetcher, the pass-through's and the create path's alike.
    media = MediaFetcher.from_settings(settings.fetch, settings.limits)
    passthrough = Passthrough(generations.gateway, media=media, salts=salts)
    prompts = Prompts(backend.prompts, backend.store, ttl=settings.store.response_ttl)
    inputs = RequestInputs(media, documents.files, prompts, documents.extractor)
    return Services(
        responses=ResponsesService(
            generations, background, stored, inputs, salts, limits=settings.limits,
            tolerance=settings.tolerance, mcp=settings.mcp, ttls=settings.store, cache=cache,
            drain=process.draining, leases=process.leases),
        stored=stored,
        conversations=Conversations(backend.store, settings.store, w.sealer, ids=backend.ids),
        passthrough=passthrough, background=background, files=documents.files,
        prompts=prompts, vector_stores=documents.vector_stores,
        console=Console(w.fleet, backend.store, backend.queue, process.keys, limits,
                        background, stored),
        usage=Usage(process.keys, limits, backend.store),
        chat=(CachedChat(passthrough, cache, max_entry_bytes=settings.cache.max_entry_bytes)
              if cache is not None else None))


def _documents(w: _Wiring, accounts: EmbeddingAccounts) -> _Documents:
    """Uploaded files and vector stores: searched by the REST API and by file_search, their
    files ingested by the worker; vectors from the fleet's `--embedding-model`, charged to
    their key."""
    settings, backend = w.settings, w.backend
    ttl = settings.store.response_ttl
    if settings.cache.embedding_model is not None:
        # Vectors will be used: numpy's import (~80 ms) here, at start, rather than on the event
        # loop at the first search or ingestion. Without an embedding model no vector is ever
        # made, and numpy is never loaded (core/vectors/lazynumpy.py says why that matters).
        importlib.import_module("numpy")
    # One set of extraction children per process, for input_file parts and ingestions.
    extractor = Extractor(processes=settings.limits.extract_processes,
                          cpu_seconds=settings.limits.extract_cpu_seconds)
    files = Files(backend.files, backend.store, ttl=ttl, max_bytes=settings.limits.max_file_bytes,
                  max_in_flight=settings.limits.max_uploads_in_flight, extractor=extractor)
    searcher = Searcher(backend.vectors,
                        Embedder(w.fleet, settings.cache.embedding_model,
                                 timeout=settings.timeouts.first_byte),
                        cache_bytes=settings.vectors.cache_bytes, accounts=accounts)
    vector_stores = VectorStores(backend.vectors, files, backend.queue, searcher,
                                 settings.vectors, ttl=ttl, share=QueueShare.of(settings.jobs))
    ingester = Ingester(backend.vectors, files, searcher.embedder, settings.vectors,
                        ttl_of=vector_stores.ttl_left, tracing=w.tracing, accounts=accounts)
    return _Documents(extractor, files, searcher, vector_stores, ingester)


def _generation(w: _Wiring, searcher: Searcher) -> tuple[Admission, Generations]:
    """One admission per process: requests, chat and background jobs share the caps. One
    gateway, sealer and MCP client behind every generation, create path and worker alike."""
    settings, flow = w.settings, w.settings.flow
    admission = Admission.from_settings(w.fleet, flow, settings.tenancy.keys_file)
    gateway = Gateway(w.fleet, admission,
                      SetupGate(flow.setup_slots, timeout=flow.queue_timeout)
                      if flow.setup_slots else None)
    mcp_client = McpClient(connect_timeout=settings.timeouts.connect,
                           call_timeout=settings.mcp.timeout, tracing=w.tracing)
    hosted = _hosted_tools(settings, searcher, mcp_client).traced(w.tracing)
    return admission, Generations(gateway, mcp_client, w.sealer, w.events, w.process.tasks,
                                  w.metrics, ids=w.backend.ids, hosted=hosted, tracing=w.tracing)


def _cache(w: _Wiring, accounts: EmbeddingAccounts) -> ResponseCache | None:
    settings = w.settings
    if settings.cache.mode == "off":
        return None
    return ResponseCache(w.backend.cache, w.fleet, settings.cache, settings.store, w.metrics,
                         w.process.tasks, w.backend.store, accounts=accounts)


def _keys_wired(keys: KeyRing, backend: Backend, limits: Limiter, admission: Admission,
                salts: CacheSalts) -> KeyRing:
    """`keys` bound to the store's managed keys, its tables feeding every reader."""
    keys.bind(ManagedKeyStore(backend.store.client))

    def changed(tables: KeyTables) -> None:
        limits.set_table(tables.limits)
        admission.set_priority(tables.priority)
        salts.set_groups(tables.salt_groups)

    keys.on_change(changed)
    return keys


def _hosted_tools(settings: Settings, searcher: Searcher, mcp_client: McpClient) -> HostedTools:
    """The hosted tools this process runs: web search with `--web-search`, file search with
    `--embedding-model`, code_interpreter with `--code-interpreter-mcp` (without them, they stay
    hosted tools the proxy drops or refuses, `--hosted-tools`)."""
    search, mcp = settings.web_search, settings.mcp
    return HostedTools.of(WebSearch(search.url, timeout=search.timeout,
                                    max_results=search.max_results)
                          if search.url is not None else None,
                          FileSearch(searcher)
                          if settings.cache.embedding_model is not None else None,
                          McpHostedTool.configured(
                              CODE_INTERPRETER, mcp.code_interpreter_url,
                              mcp.code_interpreter_tool, allow=mcp.allow, client=mcp_client,
                              flag="--code-interpreter-mcp")
                          if mcp.code_interpreter_url is not None else None)
