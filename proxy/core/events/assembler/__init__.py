"""The assembler: vLLM chat-completion chunks in, Responses stream events out.

    assembler.py  Assembler: reads the chunks (the per-token path), takes the MCP steps
    response.py   the response it builds: output, opening and closing items, the ending
    machine.py    Phase and the table of its transitions; the one method that changes it
    item.py       what every item kind shares (identity, numbering, stage)
    text.py       message and reasoning items      calls.py     function and custom calls
    mcpitems.py   MCP calls, approval requests, tool listings (they wait for the tool loop)
    restore.py    a response picked up from its event log     usage.py  usage mapped, summed

MCP tools run by the proxy (core/mcp.py, services/generation/toolloop.py): a `mcp_list_tools` item,
or an `mcp_call` whose arguments are whole, waits in Phase.TOOL (open, its `output_item.done`
not yet sent) while the tool loop does the I/O; `mcp_list_end` / `mcp_call_end` close it,
`next_turn()` takes the next upstream turn into the same response (numbering goes on; usage
is summed). A call closing ends the upstream turn (the rest is not read, but for its usage),
so items still never interleave. fail()/cancel() close a waiting item too (`mcp_call.failed`,
status incomplete).

Invariants (docs/protocol.md §3.5; tests/unit/test_assembler_properties.py checks them):
- `sequence_number` is assigned when an event is made: 0, 1, 2, … with no gaps, never patched.
- `output_index` is dense from 0 and follows the order of `output_item.added`; items never
  interleave (parallel tool calls become sequential items).
- Every added has its done, in stack order; `done` text equals the joined deltas; each
  `output_item.done` item is the very object that ends up in the final `output`.
- Exactly one terminal event, last: completed (finish stop/tool_calls), incomplete (length,
  content_filter), failed (error frame, abort, a stream that ends without a finish), cancelled.

No I/O, no clock, no randomness inside: ids come from `ids`, time from `clock`.
Deliberate divergences from vLLM's own Responses server: `response.incomplete` (not `completed`
with status incomplete) on truncation, and `response.failed` on errors (docs/protocol.md §5).
"""

from proxy.core.events.assembler.assembler import Assembler
from proxy.core.events.assembler.machine import Phase, PhaseError
from proxy.core.events.assembler.usage import add_usage, map_usage

__all__ = ["Assembler", "Phase", "PhaseError", "add_usage", "map_usage"]
