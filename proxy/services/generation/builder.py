"""`Generations`: the one place a generation is put together, for the create path and the
background worker alike.

    assembler(base)        the Response's state machine (its sealer when asked to seal)
    open(...)  ─────────▶  Opened: the upstream call (admitted, services/fleet/gateway.py), or the
                           MCP tool loop that opens each upstream turn itself
    recorder(...)          the stored side: event log, final write, conversation append
    generation(opened, ...)  services/generation/run.py's Generation over the three

The create path (services/responses/create.py) stores the new response between `open` and
`recorder` (the upstream must have accepted the request first); a job (services/jobs/runner.py)
finds its response stored and only runs it (`job`). Neither imports the other: the worker
knows queue mechanics, this module knows what a generation is made of.

`EndHooks`: what runs once a streamed turn has ended whole (offer it to the cache, remember it
on the socket's chain), in order, as one list instead of closures wrapping closures.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.core.errors import ProxyError
from proxy.core.events.assembler import Assembler
from proxy.core.ids import IdFactory, new_id
from proxy.core.request.items import seal_reasoning
from proxy.core.seal import Sealer
from proxy.core.translate.fleet_errors import failure_code, in_responses_words
from proxy.core.types import ResponseObject
from proxy.services.eventlog.ending import record_all
from proxy.services.eventlog.log import EventLog
from proxy.services.eventlog.recorder import ConversationTurn, Recorder
from proxy.services.fleet.fleet import Call
from proxy.services.fleet.gateway import Gateway
from proxy.services.generation.run import Generation
from proxy.services.generation.spec import JobSpec
from proxy.services.generation.toolloop import LoopPlan, ToolLoop
from proxy.services.process.loops import TaskSet
from proxy.services.tools.hosted import HostedTools
from proxy.services.tools.mcpclient import McpClient
from proxy.store.base import ResponseRecord, Store
from proxy.telemetry.metrics import Metrics
from proxy.telemetry.tracing import Tracing

# The first sequence number a worker writes: the log already holds created (0) and queued (1).
FIRST_WORKER_SEQ = 2


class EndHooks(list[Callable[[], None]]):
    """Called as one: each hook in the order added. Runs only when a turn ended whole."""

    def __call__(self) -> None:
        for hook in self:
            hook()


@dataclass
class Opened:
    """A generation's upstream side: one call, or (MCP tools) the loop that opens its turns."""

    call: Call | None = None
    loop: ToolLoop | None = None

    @property
    def home(self) -> str | None:
        """The replica that served the last upstream turn (a tool loop may take several):
        where the chain's next turn should go for its prefix cache. Read at the end."""
        if self.call is not None:
            return self.call.replica.url
        return self.loop.home if self.loop is not None else None


@dataclass(frozen=True)
class Generations:
    """One per process (proxy/runtime.py), shared by the create path and the worker, so both
    run on the same sealer, MCP client and admission."""

    gateway: Gateway
    mcp: McpClient
    sealer: Sealer
    event_log: EventLog  # where a generation's record goes (its store and TTLs with it)
    tasks: TaskSet
    metrics: Metrics
    clock: Callable[[], float] = field(default=time.time)
    ids: IdFactory = field(default=new_id)
    # The hosted tools this process runs (services/tools/hosted.py: web search).
    hosted: HostedTools = field(default_factory=HostedTools)
    tracing: Tracing | None = None  # None: tracing off (proxy/telemetry/tracing.py)

    @property
    def store(self) -> Store:
        return self.event_log.store

    def assembler(self, base: ResponseObject, *, seal: bool, seq: int = 0) -> Assembler:
        return Assembler(base, ids=self.ids, clock=self.clock, seq=seq,
                         seal_reasoning=seal_reasoning(self.sealer) if seal else None)

    async def open(self, tenant: str, model: str, chat: dict[str, Any], *,
                   plan: LoopPlan | None, affinity: str | None, home: str | None,
                   priority: bool, bounded: bool = True) -> Opened:
        """The upstream stream (admitted; `bounded=False` for a job), or the tool loop."""
        if plan is not None:
            return Opened(loop=ToolLoop(plan, self.mcp, self.gateway, chat, tenant,
                                        affinity=affinity, home=home, priority=priority,
                                        hosted=self.hosted))
        with in_responses_words():  # the fleet's chat names, as the client's Responses ones
            call = await self.gateway.open(
                model, tenant, orjson.dumps(chat), stream=True, affinity=affinity, home=home,
                priority=priority, bounded=bounded)
        return Opened(call=call)

    def recorder(self, tenant: str, *, log_for: str | None = None,
                 conversation: ConversationTurn | None = None, stored: bool = True) -> Recorder:
        """`log_for`: the response id whose event log the turn writes (None: final object only)."""
        events = self.event_log
        return Recorder(events.store, tenant, ttl=events.ttl, event_ttl=events.event_ttl,
                        log_handle=events.open(log_for) if log_for is not None else None,
                        conversation=conversation, stored=stored, tracing=self.tracing)

    def generation(self, opened: Opened, assembler: Assembler, recorder: Recorder | None, *,
             encode: bool = True, started: bool = False) -> Generation:
        return Generation(opened.call, assembler, self.tasks, recorder=recorder, encode=encode,
                    started=started, metrics=self.metrics, loop=opened.loop)

    async def job(self, record: ResponseRecord, spec: JobSpec) -> Generation | None:
        """A background job's turn, its response already stored `in_progress` with its first
        events logged. None when no upstream could be opened: the response is then ended
        `failed` here (its end stored), and no turn runs."""
        assembler = self.assembler(dict(record.response), seal=spec.seal, seq=FIRST_WORKER_SEQ)
        assembler.know_tools(spec.known_tools or [])
        recorder = self.recorder(record.tenant, log_for=record.id,
                                 conversation=await self._conversation(record, spec))
        try:
            # A job waits for a saturated fleet like a request, past the queue's length bound
            # (at most --worker-concurrency jobs wait) but not past its deadline.
            opened = await self.open(record.tenant, spec.model, spec.chat, plan=spec.tool_plan,
                                     affinity=spec.affinity, home=spec.home,
                                     priority=spec.priority, bounded=False)
        except ProxyError as exc:
            await record_all(recorder, assembler.resume()
                             + assembler.fail(exc.message, failure_code(exc)))
            return None
        return self.generation(opened, assembler, recorder, started=True)

    async def _conversation(self, record: ResponseRecord,
                            spec: JobSpec) -> ConversationTurn | None:
        if not spec.conversation:
            return None
        items = await self.store.input_items(record.tenant, record.id) or []
        return ConversationTurn(record.tenant, spec.conversation, items)
