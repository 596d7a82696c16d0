"""One WebSocket connection's steering (`response.steer`): the responses running on it, the
input queued for each, and what becomes of that input when a response ends.

    begin(body)       a create about to run → its `Run` (the input a continuation inherits
                      from a response that waited for the client's tools is put first)
    Run.attach        (services/responses/create.py) the run's response exists: steerable now
    steer(frame)      a client's steer: checked (core/events/steer.py), queued on its response
                      → `response.steer.accepted` (and the turn is asked to stop at its next
                      safe boundary, services/generation/boundary.py), or `.failed`
    end(run)          the run is over → its queued input goes to an automatic successor (a
                      `Run` to start on the same lane), waits for the client's continuation
                      (`response.steer.pending`), or comes back (`response.steer.failed`)

Each response moves running → ended (remembered, the last `KEPT`); a steer may target a running
response (queued, at most `MAX_PENDING` each) or an ended one that waits for the client's tool
outputs (queued there too, pending at once). Steering input is committed by the `response.created`
of the response that carries it; a create that fails before it returns the input in
`response.steer.failed` (`successor_creation_failed`) with the same steer ids.

No I/O: the caller (web/socket/connection.py, lanes.py) sends the events this returns, in
order, and runs the successor on the steered response's lane. Everything here lives as long
as the connection (not a lane: a lane is forgotten once idle, its pending steers are not): a
client that leaves drops what it queued, as it drops its running response.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from proxy.core import types as t
from proxy.core.events import steer as st
from proxy.core.ids import IdFactory, new_id
from proxy.core.types import Event
from proxy.services.generation.run import Generation
from proxy.services.process import offload

# Steers waiting on one response: a client typing faster than the model can be steered is
# told so rather than queueing without bound.
MAX_PENDING = 8
# Ended responses remembered per connection (what a late steer is told, what a continuation
# inherits): as many as the connection's chain memory keeps (localchains.py).
KEPT = 8
STEER_ID = "steer"


@dataclass
class Queued:
    """One accepted steer: its id, its input as sent (what a failure returns) and as the user
    messages a successor's input gets."""

    id: str
    sent: Any
    messages: list[dict[str, Any]]


@dataclass
class Run:
    """One create on the connection, from `begin` to `end`: its body (what a successor
    inherits), the steers it commits (`inherited`) and those queued on it (`queue`)."""

    body: dict[str, Any]
    inherited: list[Queued] = field(default_factory=list)
    automatic: bool = False  # a successor the proxy started (no create of the client's)
    queue: list[Queued] = field(default_factory=list)
    response_id: str | None = None
    turn: Generation | None = None
    refused: str | None = None  # the create's error: no response was made

    @property
    def stream_id(self) -> str | None:
        return _lane_of_body(self.body)

    def attach(self, response_id: str, turn: Generation | None) -> None:
        """The create made its response (and its turn, None when served whole from the
        response cache): from now on it can be steered."""
        self.response_id = response_id
        self.turn = turn

    def fail(self, message: str) -> None:
        """The create failed before its response existed."""
        self.refused = message

    @property
    def final(self) -> dict[str, Any] | None:
        return self.turn.assembler.final if self.turn is not None else None

    def successor_follows(self) -> bool:
        """Whether an automatic successor starts once this run ends (read at its terminal
        event: a create that arrives meanwhile is then refused as one in progress)."""
        final = self.final
        return (bool(self.queue) and final is not None
                and final.get("status") in (t.S_COMPLETED, t.S_INCOMPLETE)
                and not st.required_input(final.get("output") or []))


@dataclass
class _Ended:
    status: str
    stream_id: str | None
    waiting: list[dict[str, Any]]  # the required input stubs, until a continuation comes
    queue: list[Queued] = field(default_factory=list)  # pending for that continuation


@dataclass
class Settled:
    """What `end` leaves to do: events to send, in order, then the successor to run."""

    events: list[Event]
    successor: Run | None = None


class Steering:
    """`max_items`: the create's input item limit (`--max-input-items`), which a steer's input
    is held to as well."""

    def __init__(self, *, max_items: int, ids: IdFactory = new_id) -> None:
        self._max_items = max_items
        self._ids = ids
        self._runs: list[Run] = []
        self._ended: OrderedDict[str, _Ended] = OrderedDict()
        self._seq: dict[str | None, int] = {}  # steer events are numbered per lane

    def begin(self, body: dict[str, Any]) -> Run:
        """A client's create about to run (`body` with its lane's `stream_id`, if any).
        Continuing a response that waits for the client's tool outputs on that response's own
        lane, it takes the input queued there, in submission order, before its own. A
        continuation from another lane (a fork: `stream_id` routes, `previous_response_id` is
        the lineage) leaves that input to the one on the response's lane."""
        previous = body.get("previous_response_id")
        ended = self._ended.get(previous) if isinstance(previous, str) else None
        inherited: list[Queued] = []
        if ended is not None and ended.stream_id == _lane_of_body(body):
            inherited, ended.queue, ended.waiting = ended.queue, [], []
            if inherited:
                body = st.with_input_first(body, [m for q in inherited for m in q.messages])
        run = Run(body, inherited)
        self._runs.append(run)
        return run

    async def steer(self, frame: dict[str, Any], size: int = 0) -> tuple[list[Event],
                                                                         Generation | None]:
        """A client's `response.steer` (`type` taken off): the events that answer it, and the
        turn to ask to stop (after the events are sent, so acceptance comes first)."""
        try:
            # A large input's parts (inline files) are read off the loop, as a create's are.
            checked = await offload.run(size, st.parse_steer, frame, max_items=self._max_items)
        except st.SteerRefused as refused:
            target = st.target_of(frame)
            return [self._failed(refused.code, refused.message, target,
                                 st.returned_input(frame), self._lane_of(target))], None
        target = checked.previous_response_id
        run = next((r for r in self._runs if r.response_id == target), None)
        if run is not None:
            return self._onto_running(run, checked)
        ended = self._ended.get(target)
        if ended is not None and ended.waiting:
            return self._onto_waiting(target, ended, checked), None
        if ended is None:
            code, why = st.NOT_FOUND, "is not running on this connection"
        elif ended.status in (t.S_COMPLETED, t.S_INCOMPLETE):
            code, why = st.ALREADY_COMPLETED, "has completed"
        else:
            code, why = st.NOT_ACTIVE, f"ended {ended.status}"
        lane = ended.stream_id if ended is not None else None
        return [self._failed(code, f"Response '{target}' {why}; it takes no steering input.",
                             target, checked.returned, lane)], None

    def _onto_running(self, run: Run, checked: st.SteerInput
                      ) -> tuple[list[Event], Generation | None]:
        target, lane = checked.previous_response_id, run.stream_id
        refusal = _refusal(run)
        if refusal is not None:
            code, message = refusal
            return [self._failed(code, message, target, checked.returned, lane)], None
        queued = Queued(self._ids(STEER_ID), checked.returned, checked.messages)
        run.queue.append(queued)
        return [st.accepted(queued.id, target, self._next(lane), lane)], run.turn

    def _onto_waiting(self, target: str, ended: _Ended, checked: st.SteerInput) -> list[Event]:
        """A steer for a response that stopped for the client's tools: queued for the
        client's continuation, and pending at once."""
        lane = ended.stream_id
        if len(ended.queue) >= MAX_PENDING:
            return [self._failed(st.TOO_MANY, _too_many(target), target, checked.returned,
                                 lane)]
        queued = Queued(self._ids(STEER_ID), checked.returned, checked.messages)
        ended.queue.append(queued)
        return [st.accepted(queued.id, target, self._next(lane), lane),
                st.pending(queued.id, target, ended.waiting, self._next(lane), lane)]

    def end(self, run: Run) -> Settled:
        """`run` is over (its terminal event or its error sent)."""
        self._runs.remove(run)
        if run.response_id is None:
            # No response carries the inherited input: it comes back, with its ids.
            why = f"The response could not be created: {run.refused or 'no response'}"
            return Settled([self._failed(st.SUCCESSOR_FAILED, why, _previous(run), q.sent,
                                         run.stream_id, q.id) for q in run.inherited])
        final = run.final
        if final is None:  # served whole from the cache, or (a turn) never ended
            final = {"status": t.S_COMPLETED if run.turn is None else t.S_FAILED}
        status, output = str(final.get("status")), final.get("output") or []
        waiting = st.required_input(output) if status == t.S_COMPLETED else []
        ended = _Ended(status, run.stream_id, waiting)
        events = self._remember(run.response_id, ended)
        if not run.queue:
            return Settled(events)
        target, lane = run.response_id, run.stream_id
        if status not in (t.S_COMPLETED, t.S_INCOMPLETE):
            why = f"Response '{target}' ended {status}; no successor continues from it."
            return Settled(events + [self._failed(st.SUCCESSOR_FAILED, why, target, q.sent,
                                                  lane, q.id) for q in run.queue])
        if waiting:
            ended.queue = run.queue
            return Settled(events + [st.pending(q.id, target, waiting, self._next(lane), lane)
                                     for q in run.queue])
        body = st.successor_body(run.body, target, [m for q in run.queue for m in q.messages])
        successor = Run(body, run.queue, automatic=True)
        self._runs.append(successor)
        return Settled(events, successor)

    def _remember(self, response_id: str, ended: _Ended) -> list[Event]:
        """Kept among the last `KEPT`; input still pending on one pushed out comes back."""
        self._ended[response_id] = ended
        events: list[Event] = []
        while len(self._ended) > KEPT:
            old_id, old = self._ended.popitem(last=False)
            events += [self._failed(st.NOT_ACTIVE, f"Response '{old_id}' waited too long for "
                                    "its continuation on this connection.", old_id, q.sent,
                                    old.stream_id, q.id) for q in old.queue]
        return events

    def _lane_of(self, target: str) -> str | None:
        """The lane of a response this connection knows (None: none, or the default lane)."""
        run = next((r for r in self._runs if r.response_id == target), None)
        if run is not None:
            return run.stream_id
        ended = self._ended.get(target)
        return ended.stream_id if ended is not None else None

    def _failed(self, code: str, message: str, target: str, sent: Any, lane: str | None,
                steer_id: str | None = None) -> Event:
        return st.failed(code, message, target, sent, self._next(lane), steer_id=steer_id,
                         stream_id=lane)

    def _next(self, lane: str | None) -> int:
        seq = self._seq.get(lane, 0)
        self._seq[lane] = seq + 1
        return seq


def _refusal(run: Run) -> tuple[str, str] | None:
    """Why a running response takes no (more) steering input, or None."""
    target = run.response_id
    body = run.body
    if body.get("conversation") or body.get("context_management"):
        return st.NOT_SUPPORTED, (f"Response '{target}' is bound to a conversation or compacts "
                                  "automatically; steering does not support it.")
    final = run.final
    if final is not None:  # its terminal event is made (perhaps not yet sent)
        if final.get("status") in (t.S_COMPLETED, t.S_INCOMPLETE):
            return st.ALREADY_COMPLETED, f"Response '{target}' has completed."
        return st.NOT_ACTIVE, f"Response '{target}' ended {final.get('status')}."
    if run.turn is None:  # served whole from the response cache
        return st.ALREADY_COMPLETED, f"Response '{target}' has completed."
    if len(run.queue) >= MAX_PENDING:
        return st.TOO_MANY, _too_many(str(target))
    return None


def _too_many(target: str) -> str:
    return (f"Response '{target}' already has {MAX_PENDING} steers waiting; wait for them to "
            "be applied.")


def _lane_of_body(body: dict[str, Any]) -> str | None:
    lane = body.get("stream_id")
    return lane if isinstance(lane, str) else None


def _previous(run: Run) -> str:
    previous = run.body.get("previous_response_id")
    return previous if isinstance(previous, str) else ""
