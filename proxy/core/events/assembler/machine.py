"""The assembler's phase, and the one way it changes.

    READY ──reasoning──▶ REASONING ─┐        (any kind switch closes the open item first and
      │  ──content────▶ MESSAGE ────┼─▶ ...   opens the next at output_index + 1)
      │  ──tool call──▶ FUNCTION_CALL┘
      └─ finish_reason ─▶ FINISHED (open item closed) ─ end() ─▶ DONE (terminal event)
       error frame / fail() / cancel() from any state ──────────▶ DONE

TOOL: an MCP item the proxy runs (an `mcp_list_tools`, or an `mcp_call` whose arguments are
whole) waits there, open, while the tool loop (services/generation/toolloop.py) does the I/O; its
end or `next_turn()` goes back to READY. Content after a finish_reason opens an item again
(FINISHED → a kind), as it always did.

`NEXT` is the whole table. A change not in it is a bug in the assembler, never something an
upstream can cause (every stream, however odd, only takes these edges), so `_to` raises
`PhaseError` rather than emitting events no client could follow.
"""

from __future__ import annotations

import enum


class Phase(enum.Enum):
    READY = "ready"
    REASONING = "reasoning"
    MESSAGE = "message"
    FUNCTION_CALL = "function_call"
    FINISHED = "finished"
    TOOL = "tool"  # an MCP item waits for the tool loop (services/generation/toolloop.py) to run it
    DONE = "done"

    # Hashed by identity (members are singletons, compared by identity): `Enum.__hash__` is a
    # Python function hashing the member's name, two calls per lookup in `NEXT` or a set of
    # phases (`_to`, four times a short answer: 8 calls).
    __hash__ = object.__hash__


_ITEMS = frozenset({Phase.REASONING, Phase.MESSAGE, Phase.FUNCTION_CALL})

NEXT: dict[Phase, frozenset[Phase]] = {
    # READY → READY: `next_turn()` after an MCP call ended; → TOOL: a listing starts, or a
    # restored response stops at a waiting MCP item.
    Phase.READY: _ITEMS | {Phase.READY, Phase.TOOL, Phase.FINISHED, Phase.DONE},
    Phase.REASONING: frozenset({Phase.READY}),
    Phase.MESSAGE: frozenset({Phase.READY}),
    # → TOOL: an MCP call's arguments are whole; it waits open for the tool loop.
    Phase.FUNCTION_CALL: frozenset({Phase.READY, Phase.TOOL}),
    # → FINISHED: a second finish_reason; → READY: the tool loop's next upstream turn.
    Phase.FINISHED: _ITEMS | {Phase.READY, Phase.FINISHED, Phase.DONE},
    Phase.TOOL: frozenset({Phase.READY, Phase.DONE}),
    Phase.DONE: frozenset(),
}


_DONE = Phase.DONE  # bound once: an enum member's lookup costs ~60 ns on 3.11


class PhaseError(RuntimeError):
    """The assembler tried a change of phase its table does not allow (a bug)."""


class Machine:
    """Holds `phase`; `_to` is the only place that changes it."""

    def __init__(self) -> None:
        self.phase = Phase.READY

    @property
    def done(self) -> bool:  # asked once per upstream payload (core/events/chatstream.py)
        return self.phase is _DONE

    def _to(self, phase: Phase) -> None:
        if phase not in NEXT[self.phase]:
            raise PhaseError(f"assembler: no transition {self.phase.value} → {phase.value}")
        self.phase = phase
