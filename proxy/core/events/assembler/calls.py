"""Tool calls the client runs: a function call, and a custom tool's call (its input decoded
from the arguments as they come, core/tools/custominput.py). Both carry the name (and namespace)
the client gave (core/tools/toolnames.py), not the flattened one the model saw."""

from __future__ import annotations

from proxy.core import types as t
from proxy.core.events.assembler.item import STREAMING, Numbering, OpenItem
from proxy.core.events.assembler.machine import Phase
from proxy.core.tools.custominput import InputStream
from proxy.core.types import Event, Item


class PendingCall:
    """A tool call whose name has not arrived yet (some parsers send it late)."""

    __slots__ = ("args", "call_id", "index")

    def __init__(self, index: int, call_id: str | None) -> None:
        self.index = index
        self.call_id = call_id
        self.args: list[str] = []


class CallItem(OpenItem):
    """Any call (these and MCP's): which upstream tool call it streams (`call_index`; None
    when not the model's own stream: restored, or an approved MCP call), its id, the name."""

    __slots__ = ("call_id", "call_index", "name")
    kind = Phase.FUNCTION_CALL

    def __init__(self, item_id: str, index: int, seq: Numbering, *, name: str,
                 call_id: str = "", call_index: int | None = None) -> None:
        super().__init__(item_id, index, seq)
        self.name = name
        self.call_id = call_id
        self.call_index = call_index


class FunctionCallItem(CallItem):
    __slots__ = ("namespace",)

    def __init__(self, item_id: str, index: int, seq: Numbering, *, name: str,
                 call_id: str, namespace: str | None = None,
                 call_index: int | None = None) -> None:
        super().__init__(item_id, index, seq, name=name, call_id=call_id, call_index=call_index)
        self.namespace = namespace

    def open(self, events: list[Event]) -> None:
        events.append(self.added(self.item(t.S_IN_PROGRESS, "")))

    def delta(self, text: str, events: list[Event]) -> None:
        self.parts.append(text)
        seq = self.seq
        number = seq.next  # `seq.take()`, inline: this runs per token (item.py `Numbering`)
        seq.next = number + 1
        events.append({"type": t.ARGS_DELTA, "sequence_number": number,
                       "item_id": self.item_id, "output_index": self.index, "delta": text})

    def close(self, status: str, events: list[Event]) -> Item:
        text = "".join(self.parts)
        if self.stage == STREAMING:
            # A call cut before any arguments (vLLM 0.32 streams only its name) has a done
            # and no delta: OpenAI never sends an empty one, and SDKs that render deltas
            # would show nothing for it anyway. (vLLM's own Responses stack checker pairs
            # every done with a delta; tests/support/conformance.py accepts this one.)
            events.append(self.event(t.ARGS_DONE, arguments=text, name=self.name))
        return self.item(status, text)

    def item(self, status: str, text: str) -> Item:
        out: Item = {"id": self.item_id, "type": t.FUNCTION_CALL, "status": status,
                     "arguments": text, "call_id": self.call_id, "name": self.name}
        if self.namespace is not None:
            out["namespace"] = self.namespace
        return out


class CustomToolCallItem(FunctionCallItem):
    """Its `decoder` turns argument fragments into input deltas; None when restored from a
    log (its `parts` are then the input deltas already sent)."""

    __slots__ = ("decoder",)

    def __init__(self, item_id: str, index: int, seq: Numbering, *, name: str,
                 call_id: str, namespace: str | None = None,
                 call_index: int | None = None) -> None:
        super().__init__(item_id, index, seq, name=name, call_id=call_id,
                         namespace=namespace, call_index=call_index)
        self.decoder: InputStream | None = InputStream()

    def delta(self, text: str, events: list[Event]) -> None:
        self.parts.append(text)
        decoder = self.decoder
        text = decoder.feed(text) if decoder is not None else ""
        if text:  # the input is the string inside the arguments: decoded as it comes
            seq = self.seq
            number = seq.next  # `seq.take()`, inline: per token (item.py `Numbering`)
            seq.next = number + 1
            events.append({"type": t.CUSTOM_INPUT_DELTA, "sequence_number": number,
                           "item_id": self.item_id, "output_index": self.index,
                           "delta": text})

    def close(self, status: str, events: list[Event]) -> Item:
        decoder = self.decoder
        if decoder is None:  # restored: the input is what its logged deltas said
            text, rest, sent = "".join(self.parts), "", bool(self.parts)
        else:
            text, rest = decoder.finish("".join(self.parts))
            sent = bool(decoder.sent)
        if self.stage == STREAMING:
            if rest or not sent:  # every done has a delta before it
                events.append(self.event(t.CUSTOM_INPUT_DELTA, delta=rest))
            events.append(self.event(t.CUSTOM_INPUT_DONE, input=text))
        return self.item(status, text)

    def item(self, status: str, text: str) -> Item:
        out: Item = {"id": self.item_id, "type": t.CUSTOM_TOOL_CALL, "status": status,
                     "call_id": self.call_id, "input": text, "name": self.name}
        if self.namespace is not None:
            out["namespace"] = self.namespace
        return out
