"""`POST /v1/responses`: parse, expand history, translate, open the upstream, run the turn.

Order of work for one request (what can fail where):
1. parse and validate (400 naming the field; sealed blobs have their seal checked);
2. expand history: the `previous_response_id` chain (400 `previous_response_not_found`) or the
   conversation's items (404), and the `item_reference`s; only these and `store` touch the
   store, so `store: false` traffic without history goes on while Redis is down. What the
   request expands to (history, references, opened blobs) is bounded by `--max-body-bytes`
   (core/request/expansion.py: a 400 naming the parameter) before anything is translated or stored;
3. choose a replica and open its chat stream, waiting only for the response *headers*: unknown
   model (404), refused connection (502), upstream 4xx such as context-too-long (400) are still
   plain HTTP errors here, because vLLM validates before it answers;
4. store the new response (`in_progress`, with its input items) when `store` is true;
5. from then on everything is an event (`services/generation/run.py`): `response.created` and
   `response.in_progress` go out at once, chunks become events as they arrive, and a cut,
   stalled or erroring upstream becomes `response.failed` with the open items closed.
The non-streaming path runs the very same turn and returns the final object.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import orjson

from proxy.core import ids as idp
from proxy.core import mcp
from proxy.core import types as t
from proxy.core.cache.key import USE_CACHE, Directives
from proxy.core.compaction import OBJECT as COMPACTION_OBJECT
from proxy.core.compaction import compacted_output, has_compaction, parse_compact_body
from proxy.core.context.requestctx import client_traceparent, current_request_id
from proxy.core.errors import (
    InvalidRequest,
    NotFound,
    PreviousResponseNotFound,
    ProxyError,
    ShuttingDown,
    UpstreamError,
)
from proxy.core.events.assembler import Assembler, map_usage
from proxy.core.events.encoding import ends_stream
from proxy.core.hosted import hosted_by_choice, includes
from proxy.core.policy.tenancy import CacheSalts
from proxy.core.request.callids import check_call_ids
from proxy.core.request.create import ResponsesRequest, parse_request
from proxy.core.request.expansion import Expansion
from proxy.core.request.items import fetches_media, parse_input
from proxy.core.request.tolerance import Tolerance, tolerance_headers
from proxy.core.tools import toolsearch
from proxy.core.translate.chat import to_chat_request
from proxy.core.translate.effort import fit_effort
from proxy.core.types import EventBatch, EventBatches, Item, ResponseObject
from proxy.services.cache.responses import OFF, Lookup, ResponseCache
from proxy.services.eventlog.ownership import Leases
from proxy.services.eventlog.recorder import ConversationTurn, Recorder
from proxy.services.generation.builder import EndHooks, Generations, Opened
from proxy.services.generation.run import Generation
from proxy.services.generation.spec import JobSpec
from proxy.services.generation.toolloop import LoopPlan
from proxy.services.jobs.background import Background
from proxy.services.metering.meter import Meter, tokens_of, turn_spent
from proxy.services.process import offload
from proxy.services.process.drain import SHUTTING_DOWN, Drain
from proxy.services.responses.compaction import Compactor
from proxy.services.responses.inputs import RequestInputs
from proxy.services.responses.localchains import LocalChains
from proxy.services.responses.references import find_references
from proxy.services.responses.steering import Run
from proxy.services.responses.stored import StoredResponses
from proxy.services.responses.tokenize import fit, measure
from proxy.settings import LimitSettings, McpSettings, StoreSettings, ToleranceSettings
from proxy.store.base import MAX_CHAIN_DEPTH, ResponseRecord, StoredEvent
from proxy.telemetry.tracing import current_traceparent, store_write

# No set-up gate: one stateless context for every create (`setting_up`).
_NO_GATE: contextlib.nullcontext[None] = contextlib.nullcontext()


@dataclass
class Outcome:
    """What the web layer renders: a JSON body, or a stream of event batches (not SSE yet)."""

    body: ResponseObject | None = None
    stream: EventBatches | None = None
    headers: dict[str, str] = field(default_factory=dict)  # e.g. x-proxy-cache


@dataclass(frozen=True)
class History:
    items: list[Item]
    parents: tuple[str, ...] = ()
    affinity: str | None = None
    home: str | None = None  # the replica that ran the previous response (its prefix cache)
    # A compaction made for this request (context_management): first in its output.
    compaction: Item | None = None
    # The parameter the items came from (what an expansion past the limit names).
    param: str = "input"


class ResponsesService:
    """`generations`: the process's one builder (its gateway, sealer, MCP client, store);
    `background`/`stored`: submitting a job and replaying it; `leases`: the stored foreground
    responses' leases (store/leases.py; None: embedded store); `drain`: where foreground turns
    register while they run (a SIGTERM's grace can end them)."""

    def __init__(self, generations: Generations, background: Background,
                 stored: StoredResponses, inputs: RequestInputs, salts: CacheSalts, *,
                 limits: LimitSettings, tolerance: ToleranceSettings, mcp: McpSettings,
                 ttls: StoreSettings, cache: ResponseCache | None = None,
                 drain: Drain | None = None, leases: Leases | None = None) -> None:
        """`inputs`: the process's one fetcher (the pass-through holds the same one), the key's
        files and prompt templates; `salts`: each key's prefix-cache partition, one per process
        and kept current with the keys. The settings groups: `limits` (items, bytes), the
        `tolerance` of unknown parameters, `mcp` (servers allowed, calls per response), the
        `ttls` a stored response is written with."""
        self._generations = generations
        self._gateway = generations.gateway
        self._store = generations.store
        self._cache = cache
        self._leases = leases
        self._drain = drain or Drain()
        self._background = background
        self._stored = stored
        self._limits, self._tolerance, self._mcp, self._ttls = limits, tolerance, mcp, ttls
        self._clock = generations.clock
        self._ids = generations.ids
        self._sealer = generations.sealer
        self._salts = salts
        self._compactor = Compactor(self._gateway, self._sealer, self._ids)
        self._inputs = inputs
        # What parsing a create needs from the settings and the hosted tools, made once.
        self._parse_tolerance = Tolerance.of(tolerance.params, tolerance.hosted_tools)
        self._run_hosted = generations.hosted.tool_types()

    def setting_up(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Around a create's whole set-up, from its body read on: its slot in the process's
        set-up gate (services/fleet/setups.py), given back once it is admitted to a replica."""
        gate = self._gateway.setups
        return gate.held() if gate is not None else _NO_GATE

    async def create(self, tenant: str, body: dict[str, Any],
                     directives: Directives = USE_CACHE, *, meter: Meter | None = None,
                     local: LocalChains | None = None, size: int = 0,
                     steering: Run | None = None) -> Outcome:
        """`meter`: the request's per-key account (services/metering/meter.py), told what it
        spends. `local`: a WebSocket connection's memory (services/responses/localchains.py): a
        `previous_response_id` found there needs no store read, and a streamed response that
        ends whole is remembered there. `size`: the body's bytes; a large body is parsed,
        translated and keyed off the event loop (services/process/offload.py). `steering`:
        a WebSocket create's run (services/responses/steering.py), told its response and turn
        once they exist, so a `response.steer` can reach them."""
        meter = meter or Meter()
        request, history, chat = await self._prepare(tenant, body, local, create=meter,
                                                      size=size)
        outcome = await self._create(tenant, request, history, chat, directives, meter, local,
                                     size=size, steering=steering)
        if request.ignored_params or request.dropped_tools:  # else no headers: no call
            outcome.headers.update(tolerance_headers(request.ignored_params,
                                                     request.dropped_tools))
        return outcome

    async def _prepare(self, tenant: str, body: dict[str, Any],
                       local: LocalChains | None = None, *, create: Meter | None = None,
                       size: int = 0) -> tuple[ResponsesRequest, History, dict[str, Any]]:
        """Parse, resolve item references, expand history, translate and (truncation auto) fit:
        everything up to the chat request a create sends, shared with `count_input_tokens`.
        `create`: the create's meter (None: `input_tokens`, which only counts). A create checks
        the key's storage budget when it will store, and runs the automatic compaction a request
        asks for (services/responses/compaction.py), charging its summarisation turn to the key;
        it stays out of the response's `usage`, which keeps describing this turn's context
        (agents read `input_tokens` as the context's size and would see the pre-compaction
        one)."""
        # Each step below that has nothing to do for a plain request (no prompt, no tools, no
        # references, no history, no media, a small body) is skipped here rather than called
        # to return at once: a coroutine and a call or two each, ~25 calls a create.
        if body.get("prompt") is not None:
            body = await self._inputs.with_prompt(tenant, body)  # `prompt` → instructions
        # The walks of a large body (parse, expansion, translation) run off the loop: each is
        # linear, but 16 MiB of small items is most of a second of Python (a stalled loop).
        small = size <= offload.OFFLOAD_BYTES  # `offload.run` would call the step inline
        parsing = functools.partial(
            parse_request, body, self._ids, max_input_items=self._limits.max_input_items,
            tolerance=self._parse_tolerance, sealer=self._sealer, mcp_allow=self._mcp.allow,
            run_hosted=self._run_hosted)
        request = parsing() if small else await offload.run(size, parsing)
        if request.service_tier == "priority" and not self._gateway.grants(tenant):
            request = request.evolved(service_tier="default")
        tools = body.get("tools")
        if create is not None and tools:
            # Hosted tools naming what the key does not hold (another key's vector store) are
            # refused now, before any upstream call or store write.
            extras = await self._generations.hosted.vet(tenant, tools)
            if extras:
                request = request.evolved(hosted_options={
                    kind: {**options, **extras.get(kind, {})}
                    for kind, options in request.hosted_options.items()})
        if create is not None and (request.store or request.conversation):
            # Before any upstream call (compaction, truncation's count, the turn): a key that
            # holds its storage budget is refused now (429). The store's create checks again,
            # atomically, for two requests racing for the last bytes.
            await self._store.check_storage(tenant, rechecked=True)
        found = await find_references(self._store, tenant, request)
        history = (await self._history(tenant, request, local)
                   if request.previous_response_id or request.conversation else
                   History([], affinity=request.prompt_cache_key))  # `_history`'s own answer
        salt = self._salts.salt(tenant)
        request, shown, seen, expansion = (
            self._expand(request, found, history, cache_salt=salt) if small else
            await offload.run(size, self._expand, request, found, history, cache_salt=salt))
        check_call_ids(history.items, request.input)
        if not small or fetches_media(shown.input) or (history.items and
                                                        fetches_media(history.items)):
            shown = await self._with_media(tenant, shown, history, expansion, size)
        if request.auto_compact or (history.items and has_compaction(history.items)) or \
                has_compaction(request.input):
            chat, made = await self._compactor.context(
                tenant, shown, seen, compact=create is not None,
                affinity=history.affinity, home=history.home)
            if made is not None and create is not None:  # made only when compacting
                create.charge(tokens_of(made.usage))
                history = dataclasses.replace(history, compaction=made.item)
        else:
            chat = (to_chat_request(shown, seen) if small else
                    await offload.run(size, to_chat_request, shown, seen))
            if chat.get("reasoning_effort") is not None:  # the fleet's limits matter only then
                chat = fit_effort(chat, self._gateway.fleet.efforts(request.model))
        if request.truncation == "auto":
            chat = await fit(self._gateway, chat, reserve=request.max_output_tokens,
                             affinity=history.affinity)
        return request, history, chat

    def _expand(self, request: ResponsesRequest, found: dict[str, Item], history: History,
                **changes: Any) -> tuple[ResponsesRequest, ResponsesRequest, list[Item], Expansion]:
        """(the request to store: references resolved, blobs sealed; the same to translate:
        blobs opened; the history to translate; the budget, which the files' texts spend
        next), all of it counted (core/request/expansion.py). `changes`: other fields set on
        both copies (the key's cache salt), made in the same two copies."""
        expansion = Expansion(self._limits.max_body_bytes, self._sealer)
        seen = expansion.history(history.items, history.param)
        stored, shown = expansion.input(request.input, found)
        kept = request.evolved(input=stored, **changes)
        # Nothing opened (the input is the one list): one frozen request serves as both.
        opened = kept if shown is stored else request.evolved(input=shown, **changes)
        return kept, opened, seen, expansion

    async def _create(self, tenant: str, request: ResponsesRequest, history: History,
                      chat: dict[str, Any], directives: Directives, meter: Meter,
                      local: LocalChains | None = None, *, size: int = 0,
                      steering: Run | None = None) -> Outcome:
        plan = self._mcp_plan(request, history)  # MCP tools: 400s before anything is stored
        response_id = self._ids(idp.RESPONSE)
        assembler = self._assembler(request, response_id)
        # Calls of tools a search loaded or an item brought come back under their names.
        known = toolsearch.loaded_tools([*history.items, *request.input])
        assembler.know_tools(known)
        if history.compaction is not None:
            assembler.preface(history.compaction)
        # A compacted turn is not served from the cache: its output must carry the compaction.
        cached = (await self._lookup(tenant, request, chat, directives, size)
                  if history.compaction is None and self._cache is not None else OFF)
        if cached.hit:
            outcome = await self._cached(tenant, request, history, assembler, cached, meter)
            if steering is not None:
                steering.attach(response_id, None)  # whole already: nothing left to steer
            return outcome
        if request.background:
            outcome = await self._submit(tenant, request, history, chat, assembler, meter,
                                         plan=plan, known=known)
            outcome.headers.update(cached.headers())
            return outcome
        # The upstream first: what it refuses (404, 400, 502) is refused before anything is
        # stored. A tool loop opens its upstream turns itself, as it runs.
        opened = await self._generations.open(
            tenant, request.model, chat, plan=plan, affinity=history.affinity,
            home=history.home, priority=request.service_tier == "priority")
        call = opened.call
        try:
            recorder = await self._recorder(tenant, request, assembler, history,
                                            replica=call.replica.url if call else None)
        except BaseException:
            if call is not None:
                await self._generations.tasks.shielded(call.aclose())
            raise
        turn = self._generations.generation(opened, assembler, recorder, encode=request.stream)
        if steering is not None:
            steering.attach(response_id, turn)
        meter.track(turn_spent(assembler, chat))
        owned = self._owned(response_id, turn, leased=request.store)
        ended = self._keeper(tenant, cached, assembler)
        if request.stream:
            if local is not None:
                ended.append(_remembering(local, assembler, request, history, opened))
            return Outcome(stream=meter.stream(_streamed(turn, owned, ended), last=ends_stream),
                           headers=cached.headers())
        async with owned:
            batches = turn.run()
            try:  # `contextlib.aclosing`, without its three calls (see `_streamed`)
                async for _ in batches:
                    pass
            finally:
                await batches.aclose()
        final = assembler.snapshot()
        if final["status"] == t.S_FAILED:
            raise _failure(final, assembler, opened)
        ended()
        return Outcome(body=final, headers=cached.headers())

    # -- the response cache (services/cache/responses.py does the work)
    # -------------------------------
    async def _lookup(self, tenant: str, request: ResponsesRequest, chat: dict[str, Any],
                      directives: Directives, size: int) -> Lookup:
        if self._cache is None or request.mcp or request.hosted or _searches(request):
            return OFF  # tools run by us (MCP, web search): never served from a cache
        return await self._cache.lookup_response(tenant, request, chat, directives, size=size)

    async def _cached(self, tenant: str, request: ResponsesRequest, history: History,
                      assembler: Assembler, cached: Lookup, meter: Meter) -> Outcome:
        assert self._cache is not None
        final, stream = await self._cache.serve_response(tenant, request, history.parents,
                                                         assembler.snapshot(), cached)
        meter.charge(tokens_of(final.get("usage")))  # served, though not generated
        self._generations.metrics.response_finished(final["status"])  # a Response, though no tokens
        if stream is None:
            return Outcome(body=final, headers=cached.headers())
        return Outcome(stream=_once(stream), headers=cached.headers())

    def _keeper(self, tenant: str, cached: Lookup, assembler: Assembler) -> EndHooks:
        """What to run once the turn has ended whole: offer the final object to the cache
        (which keeps only what it may serve again)."""
        hooks = EndHooks()
        cache = self._cache
        if cache is not None and cached.key is not None:
            hooks.append(lambda: cache.keep(tenant, cached, assembler.snapshot()))
        return hooks

    def _owned(self, response_id: str, turn: Generation, *, leased: bool) -> _Owned:
        """While a foreground turn runs: registered for the drain, and leased when stored.
        The lease itself was taken by the create (`_recorder`): here it is only held."""
        held = None
        if leased and self._leases is not None:
            recorder = turn.recorder
            held = self._leases.held(
                response_id, taken=True,
                end_stored=lambda: recorder is None or recorder.final is not None)
        return _Owned(self._drain, response_id, turn, held)

    async def count_input_tokens(self, tenant: str, body: dict[str, Any], *,
                                 size: int = 0) -> dict[str, Any]:
        """`POST /v1/responses/input_tokens`: the prompt tokens of exactly what a create with
        this body would send (history, references and truncation included)."""
        _, history, chat = await self._prepare(tenant, body, size=size)
        seen = await measure(self._gateway, chat, affinity=history.affinity)
        return {"object": "response.input_tokens", "input_tokens": seen.count}

    async def compact(self, tenant: str, body: dict[str, Any], *,
                      meter: Meter | None = None) -> Outcome:
        """`POST /v1/responses/compact`: the context (input and/or the `previous_response_id`
        chain, scoped to the key) summarised by the fleet's model: the user messages, then one
        sealed compaction item (core/compaction.py)."""
        parsed = parse_compact_body(body, strict=self._tolerance.params == "strict")
        inputs = ([] if parsed.input is None else
                  parse_input(parsed.input, self._ids,
                              max_items=self._limits.max_input_items,
                              sealer=self._sealer))
        request = ResponsesRequest(model=parsed.model, input=inputs,
                                   instructions=parsed.instructions,
                                   previous_response_id=parsed.previous_response_id,
                                   cache_salt=self._salts.salt(tenant))
        history = await self._history(tenant, request)
        _, shown, seen, expansion = self._expand(request, {}, history)
        if fetches_media(shown.input) or fetches_media(history.items):
            shown = await self._with_media(tenant, shown, history, expansion)
        done = await self._compactor.compact(tenant, shown, seen,
                                             affinity=history.affinity, home=history.home)
        if meter is not None:
            meter.charge(tokens_of(done.usage))
        return Outcome(body={
            "id": self._ids(idp.RESPONSE),
            "object": COMPACTION_OBJECT,
            "created_at": int(self._clock()),
            "output": compacted_output(done.items, done.item),
            "usage": done.usage or map_usage({"prompt_tokens": 0}),
        }, headers=tolerance_headers(parsed.ignored, ()))
    async def _with_media(self, tenant: str, request: ResponsesRequest, history: History,
                          expansion: Expansion, size: int = 0) -> ResponsesRequest:
        """The request with its image URLs fetched (services/fleet/media.py) and its files'
        text read (services/responses/inputs.py): translation then sends the fleet their data,
        never a URL to fetch. Called only when there is something to fetch or read, or the
        body is large (its walks are off the loop): its callers check."""
        where = ("previous_response_id" if request.previous_response_id else
                 "conversation" if request.conversation else "input")
        media = await self._inputs.for_items(tenant, request.input, history.items, where,
                                             expansion, size=size)
        return request.evolved(media=media) if media else request

    def _mcp_plan(self, request: ResponsesRequest, history: History) -> LoopPlan | None:
        """The tool loop's plan: MCP servers (those listed earlier in the chain, approved
        calls) and hosted tools the proxy runs (core/hosted.py), or None for a request with
        neither. An approval of nothing we asked is a 400."""
        searches = bool(request.tools) and _searches(request)  # (no tools: no search)
        if not request.mcp and not request.hosted and not searches:
            return None
        servers = {s.label: s for s in request.mcp}
        ceiling = self._mcp.max_calls
        offered, mode = mcp.offered_by_choice(request.tool_choice, tuple(servers))
        hosted, forced = hosted_by_choice(request.tool_choice, request.hosted)
        options = {k: dict(o) for k, o in request.hosted_options.items()}
        for kind, asked in includes(request.hosted, request.include).items():
            options[kind] = {**options.get(kind, {}), **asked}  # what the item shows
        searchable = [tool for tool in toolsearch.searchable(
            request.tools, [*history.items, *request.input]) if toolsearch.is_deferred(tool)]
        return LoopPlan(request.mcp, mcp.listed_in(history.items),
                        mcp.approvals(request.input, history.items, servers),
                        min(request.max_tool_calls or ceiling, ceiling), offered,
                        forced or mode, hosted, options,
                        searchable if searches else None)

    async def _submit(self, tenant: str, request: ResponsesRequest, history: History,
                      chat: dict[str, Any], assembler: Assembler, meter: Meter, *,
                      plan: LoopPlan | None = None,
                      known: list[dict[str, Any]] | None = None) -> Outcome:
        """A background response: stored queued with its first events, then queued. A model
        no replica serves is refused now (404), while the client still waits for an answer."""
        # The replica is chosen now and recorded, so a follow-up finds it before the job runs.
        replica = await self._gateway.fleet.choose(request.model, affinity=history.affinity,
                                           home=history.home)
        events = assembler.start(background=True)
        logged = [StoredEvent(e["sequence_number"], e["type"], orjson.dumps(e)) for e in events]
        record = ResponseRecord(assembler.snapshot(), tenant, parents=history.parents,
                                logged=True, replica=replica.url)
        spec = JobSpec(tenant, request.model, chat, affinity=history.affinity,
                       home=replica.url, service_tier=request.service_tier,
                       seal="reasoning.encrypted_content" in request.include,
                       conversation=request.conversation,
                       # The worker's upstream call and log lines carry this request's id.
                       request_id=current_request_id(),
                       # The worker runs the tool loop. The MCP headers ride in the job's spec
                       # (the worker needs them), never in the stored Response object.
                       tool_plan=plan,
                       # The worker renews and frees the lease, counts the usage.
                       limit=meter.job_limit(),
                       # The job's span joins this request's trace; tracing off, its
                       # upstream call carries the client's (None: neither).
                       traceparent=current_traceparent() or client_traceparent(),
                       known_tools=known or None)
        with store_write(self._generations.tracing, "submit_response"):
            await self._background.submit(record, request.input, logged, spec)
        await meter.hand_over()  # the client's replay of the job is not metered
        if request.stream:
            return Outcome(stream=self._stored.replay_record(record, after=-1))
        return Outcome(body=record.response)

    async def _history(self, tenant: str, request: ResponsesRequest,
                       local: LocalChains | None = None) -> History:
        if request.previous_response_id:
            chain = local.get(request.previous_response_id) if local is not None else None
            if chain is None:
                chain = await self._store.load_chain(tenant, request.previous_response_id)
            if chain is None:
                raise PreviousResponseNotFound(request.previous_response_id)
            if len(chain.parents) > MAX_CHAIN_DEPTH:
                raise InvalidRequest(
                    f"The chain of previous responses is longer than {MAX_CHAIN_DEPTH}; start "
                    "a new one (or use a conversation).", param="previous_response_id")
            # The whole chain lands on one replica (vLLM's prefix cache): where its last turn
            # ran, else (that one unknown or overloaded) the root's rendezvous order.
            return History(chain.items, chain.parents, affinity=chain.parents[0],
                           home=chain.replica, param="previous_response_id")
        if request.conversation:
            items = await self._store.all_conversation_items(tenant, request.conversation)
            if items is None:
                raise NotFound(f"Conversation with id '{request.conversation}' not found.",
                               param="conversation")
            return History(items, affinity=request.conversation, param="conversation")
        return History([], affinity=request.prompt_cache_key)

    def _assembler(self, request: ResponsesRequest, response_id: str) -> Assembler:
        base: ResponseObject = {
            "id": response_id,  # known to the caller: no snapshot (a copy) to read it back
            "object": "response",
            "created_at": int(self._clock()),
            "model": request.model,
            **request.echo(),
        }
        include = "reasoning.encrypted_content" in request.include
        if include:
            self._sealer.keys()  # no secret known yet: a 503 now, not a failure mid-stream
        return self._generations.assembler(base, seal=include)

    async def _recorder(self, tenant: str, request: ResponsesRequest, assembler: Assembler,
                        history: History, *, replica: str | None = None) -> Recorder | None:
        conversation = (ConversationTurn(tenant, request.conversation, request.input)
                        if request.conversation else None)
        if not request.store and conversation is None:
            return None
        recorder = self._generations.recorder(tenant, conversation=conversation,
                                              stored=request.store)
        if request.store:
            snapshot = assembler.snapshot()
            record = ResponseRecord(snapshot, tenant, parents=history.parents,
                                    logged=request.stream, replica=replica)
            # The writer's lease is taken in the same round trip as the create (store/leases.py): a
            # stored stream waits on one Redis call before its first event, not two.
            leases = self._leases
            creating = self._store.create_response(record, request.input,
                                                   ttl=self._ttls.response_ttl,
                                                   event_ttl=self._ttls.event_ttl,
                                                   lease_ms=leases.ttl_ms if leases else None)
            tracing = self._generations.tracing
            if tracing is None:  # no span: not even `store_write`'s null one (four calls)
                await creating
            else:
                with tracing.store_span("create_response"):
                    await creating
            if request.stream:
                # Its log only once it is stored. Its start is not written ahead (writer.py):
                # the record just stored is what a reader elsewhere makes it from meanwhile.
                recorder.log_handle = self._generations.event_log.open(snapshot["id"],
                                                                       early=False)
        return recorder


class _Owned:
    """The drain's registration of a turn, and inside it the turn's lease (None: unstored),
    entered and left as one `async with`. A class, not an `asynccontextmanager`: that made an
    async generator per turn (registered with the loop, closed) for two plain steps: 1.7 µs
    against 0.3, before a stream's first event; and the registration as the drain's two
    calls, not its generator context manager (~1 µs more)."""

    __slots__ = ("_drain", "_held", "_response_id", "_turn")

    def __init__(self, drain: Drain, response_id: str, turn: Generation,
                 held: contextlib.AbstractAsyncContextManager[None] | None) -> None:
        self._drain = drain
        self._response_id = response_id
        self._turn = turn
        self._held = held

    async def __aenter__(self) -> None:
        self._drain.generation_began(self._response_id, self._turn)
        if self._held is not None:
            try:
                await self._held.__aenter__()
            except BaseException:
                self._drain.generation_ended(self._response_id, self._turn)
                raise

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        try:
            if self._held is not None:
                await self._held.__aexit__(kind, exc, traceback)
        finally:
            self._drain.generation_ended(self._response_id, self._turn)


async def _streamed(turn: Generation, owned: contextlib.AbstractAsyncContextManager[None],
                    ended: Callable[[], None] | None = None) -> EventBatches:
    # The events of one upstream read leave together (one write on SSE). Closed in a
    # `finally` (what `contextlib.aclosing` does, without its three calls) so that the turn's
    # cleanup (closing the upstream, recording the end) starts as soon as we close.
    async with owned:
        batches = turn.run()
        try:
            async for batch in batches:
                if batch:
                    yield batch
        finally:
            await batches.aclose()
    # Reached only when the stream ran to its end: a client that left never gets here.
    if ended is not None:
        ended()


def _searches(request: ResponsesRequest) -> bool:
    """The request has a tool search the proxy runs (the tool loop's: core/tools/toolsearch.py)."""
    tool = toolsearch.search_tool(request.tools)
    return tool is not None and toolsearch.execution(tool) == "server"


async def _once(batch: EventBatch) -> EventBatches:
    yield batch


def _remembering(local: LocalChains, assembler: Assembler, request: ResponsesRequest,
                 history: History, opened: Opened) -> Callable[[], None]:
    # The replica that served the last turn (a tool loop may take several): the chain's home.
    return lambda: local.remember(
        assembler.snapshot(), history.items, history.parents, request.input, opened.home)


def _failure(final: dict[str, Any], assembler: Assembler, opened: Opened) -> ProxyError:
    """What a failed non-streamed turn answers with."""
    if assembler.refusal is not None:
        return assembler.refusal  # the fleet's 400, sent as the stream's first frame: a 400
    if final["error"]["message"] == SHUTTING_DOWN:
        return ShuttingDown()  # the drain's grace ran out: retry elsewhere (503)
    if opened.loop is not None and opened.loop.listing_failed:
        # as OpenAI: 424, the tool's fault
        return ProxyError(final["error"]["message"], status=424, param="tools",
                          code=mcp.SERVER_ERROR)
    return UpstreamError(final["error"]["message"])
