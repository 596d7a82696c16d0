"""Where a steered response may stop: its safe boundaries (the WebSocket `response.steer`,
services/responses/steering.py).

    text or reasoning streaming, or nothing yet      at once: the open item closes as it
                                                     stands, the upstream request is aborted
    a call's arguments streaming (the client's       after the call's item completes: a client
    tools, or an MCP or hosted tool the proxy runs)  never gets half a call, a tool never runs
                                                     on half its arguments
    the proxy running an MCP or hosted tool          after it ran, before the loop's next
                                                     upstream turn (toolloop.py `halt`)
    the upstream turn sent its finish_reason         not stopped: it is ending anyway, whole and
                                                     with its usage; the successor follows it

`Generation.steer` (run.py) asks; this module only answers whether the assembler stands at a
boundary now. The response's own ending is the assembler's (`Assembler.steered`).
"""

from __future__ import annotations

from proxy.core.events.assembler import Assembler, Phase

_AT_ONCE = frozenset({Phase.READY, Phase.REASONING, Phase.MESSAGE})


def at_boundary(assembler: Assembler) -> bool:
    """Whether the response may end now for a steer (its turn still streaming)."""
    return assembler.phase in _AT_ONCE and not assembler.turn_finished
