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
from proxy.services.admin.keyring import KeyRing, KeyTables, budgets_view, keyring_of
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
    adapters, the services the transports call, the process's own machinery)."""

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
                               wait_replicas=settings.store.wait_replicas)
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
        per_replica = settings.upstream.max_connections
        client = http or Upstream.make_pool(
            max_connections=max(POOL_CONNECTIONS, 2 * per_replica), max_per_origin=per_replica,
            ca_bundle=settings.upstream.ca_bundle, https_proxy=settings.upstream.https_proxy,
            no_proxy=settings.upstream.no_proxy)
        upstream = Upstream(client, api_key=settings.upstream.api_key, timeouts=settings.timeouts)
        fleet = Fleet(upstream, settings.fleet.upstreams,
                      interval=settings.fleet.discovery_interval,
                      probe_timeout=min(5.0, settings.timeouts.connect + 2.0),
                      specs=settings.fleet.replicas,
                      load_factor=settings.fleet.affinity_load_factor,
                      routing=settings.fleet.routing, tracing=tracing)
        metrics = metrics or Metrics()
        draining = draining or Drain()
        store, queue = backend.store, backend.queue
        # States read when /metrics is scraped, never kept in sync by the request path.
        metrics.watch_replicas(lambda: fleet.replicas)
        metrics.watch_queue(queue.length)
        metrics.watch_replication(lambda: backend.store.replication.shortfalls)
        tasks = TaskSet()
        supervisor = LoopSupervisor()
        events = EventLog(store, ttl=settings.store.response_ttl,
                          event_ttl=settings.store.event_ttl, supervisor=supervisor,
                          tracing=tracing)
        leases = None if backend.leases is None else Leases(
            backend.leases, events, ttl=settings.store.lease_ttl, owner=worker_name(),
            interrupt=draining.interrupt)
        stored = StoredResponses(store, events.followers, settings.streams, leases=leases)
        # Always built (no I/O until used): jobs of limited keys may come from other instances.
        limits = Limiter(backend.limits,
                         limit_table(settings.tenancy.keys_file, settings.tenancy.api_keys),
                         refused=metrics.rate_limited)
        # Every embedding (vector stores, the semantic cache) is charged to its key.
        accounts = EmbeddingAccounts(limits)
        cache = (ResponseCache(backend.cache, fleet, settings, metrics, tasks, store,
                               accounts=accounts)
                 if settings.cache.mode != "off" else None)
        # One admission per process: requests, chat and background jobs share the caps. One
        # gateway, sealer and MCP client behind every generation, create path and worker alike.
        admission = Admission.from_settings(fleet, settings.flow, settings.tenancy.keys_file)
        gateway = Gateway(fleet, admission,
                          SetupGate(settings.flow.setup_slots,
                                    timeout=settings.flow.queue_timeout)
                          if settings.flow.setup_slots else None)
        ttl = settings.store.response_ttl
        # Their writes traced (a span each, tracing on): uploads, vector stores, ingestions.
        traced_writes(tracing, backend.files, {"put": "put_file", "delete": "delete_file"})
        traced_writes(tracing, backend.vectors, {
            "create": "create_vector_store", "renew": "renew_vector_store",
            "delete": "delete_vector_store", "add_files": "add_vector_store_files",
            "finish_file": "finish_vector_store_file",
            "delete_file": "delete_vector_store_file"})
        # One set of extraction children per process, for input_file parts and ingestions.
        extractor = Extractor(processes=settings.limits.extract_processes,
                              cpu_seconds=settings.limits.extract_cpu_seconds)
        files = Files(backend.files, store, ttl=ttl, max_bytes=settings.limits.max_file_bytes,
                      max_in_flight=settings.limits.max_uploads_in_flight, extractor=extractor)
        # Vector stores: searched by the REST API and by file_search, their files ingested by
        # the worker; vectors from the fleet's --embedding-model, charged to their key.
        searcher = Searcher(backend.vectors,
                            Embedder(fleet, settings.cache.embedding_model,
                                     timeout=settings.timeouts.first_byte),
                            cache_bytes=settings.vectors.cache_bytes, accounts=accounts)
        vector_stores = VectorStores(backend.vectors, files, queue, searcher, settings.vectors,
                                     ttl=ttl, share=QueueShare.of(settings.jobs))
        ingester = Ingester(backend.vectors, files, searcher.embedder, settings.vectors,
                            ttl_of=vector_stores.ttl_left, tracing=tracing,
                            accounts=accounts)
        mcp_client = McpClient(connect_timeout=settings.timeouts.connect,
                               call_timeout=settings.mcp.timeout, tracing=tracing)
        generations = Generations(
            gateway, mcp_client,
            sealer, events,
            tasks, metrics, ids=backend.ids,
            hosted=_hosted_tools(settings, searcher, mcp_client).traced(tracing),
            tracing=tracing)
        media = MediaFetcher.from_settings(settings.fetch, settings.limits)
        salts = CacheSalts.of(settings.tenancy.keys_file)
        passthrough = Passthrough(gateway, media=media, salts=salts)
        keys = _keys_wired(keys or keyring_of(settings.tenancy), backend, limits, admission,
                           salts)
        prompts = Prompts(backend.prompts, store, ttl=ttl)
        runner = None
        if settings.jobs.run if worker is None else worker:
            runner = Worker(queue, generations, settings, shared=backend.shared,
                            supervisor=supervisor, limits=limits, ingest=ingester.run)
        # This process's own worker, if any, is told of its submits and cancels at once.
        background = Background(store, queue, settings.store, settings.jobs, worker=runner)
        return cls(
            settings=settings, metrics=metrics, fleet=fleet, store=store, queue=queue,
            events=events,
            services=Services(
                responses=ResponsesService(generations, settings, background, stored,
                                           cache=cache, drain=draining, leases=leases,
                                           inputs=RequestInputs(media, files, prompts,
                                                                extractor),
                                           salts=salts),
                stored=stored, conversations=Conversations(store, settings.store, sealer,
                                                           ids=backend.ids),
                passthrough=passthrough, background=background, files=files, prompts=prompts,
                vector_stores=vector_stores,
                chat=(CachedChat(passthrough, cache,
                                 max_entry_bytes=settings.cache.max_entry_bytes)
                      if cache is not None else None)),
            process=Process(
                http=client, tasks=tasks, supervisor=supervisor, draining=draining,
                worker=runner, limits=limits, leases=leases,
                sockets=KeySlots(settings.streams.ws_max_per_key), keys=keys,
                read_secret=None if sealer.ready else functools.partial(
                    keep_reading, sealer, backend.secret)),
        )

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
