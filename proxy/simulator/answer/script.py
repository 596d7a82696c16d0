"""The whole answer to one chat request, decided before the first byte is sent. Pure.

`plan(req, config, ...)` returns a `Plan`: the generated tokens in order (`pieces`), how the
answer ends, and the token accounting. `wire.py` turns a plan into vLLM's chunks or completion
object; `app.py` only paces and sends them.

Invariants:
  - the answer is reasoning pieces, then either tool-call pieces or content pieces, never both
    (a persona with `separators`, as vLLM's hermes and reasoning parsers, adds the whitespace
    the model wrote around them as content: "\n\n" after the reasoning, "\n" between calls);
  - every piece is one generated token: `completion_tokens == len(pieces)` (hidden reasoning,
    `include_reasoning: false`, is counted but never sent);
  - the token budget is min(max_tokens, max_model_len - prompt_tokens); an answer longer than
    the budget is cut to it and finishes with "length" (reasoning counts against it);
  - a `fail=error|stall|cut|abort:K` failure comes after min(K, len(pieces)) pieces; `abort`
    ends with finish_reason "abort", the others end without a finish chunk;
  - tool-call ids are derived from the request id, so a plan is a function of its inputs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Any, Literal, cast

from proxy.simulator import tokens
from proxy.simulator.answer.personas import GENERIC, Persona, close_json
from proxy.simulator.answer.schema import instance
from proxy.simulator.answer.searching import search_answer
from proxy.simulator.answer.tools import Call, choose_calls
from proxy.simulator.config import ReasoningField, SimConfig, is_reasoner
from proxy.simulator.request import ChatRequest

PieceKind = Literal["reasoning", "content", "call", "args"]
Ending = Literal["done", "error", "stall", "cut"]

FILLER = (" lorem", " ipsum", " dolor", " sit", " amet", " consectetur", " adipiscing", " elit")
THOUGHT = tokens.split("Let me think about what the user asked and how best to answer it.")
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
# Reasoning tokens a reasoner emits at reasoning_effort "medium" (or none given).
REASONER_TOKENS = 8
EFFORT_SCALE = {"none": 0.0, "minimal": 0.25, "low": 0.5, "medium": 1.0, "high": 2.0,
                "xhigh": 4.0}


@dataclass(frozen=True)
class Piece:
    kind: PieceKind
    text: str = ""
    index: int = 0  # tool-call index (call and args pieces)
    name: str = ""  # function name (call pieces)
    call_id: str = ""  # chatcmpl-tool-<hex> (call pieces)


@dataclass(frozen=True)
class Plan:
    request_id: str
    created: int
    model: str
    pieces: tuple[Piece, ...]
    calls: tuple[Call, ...]  # every call the model meant to make, complete
    finish_reason: str | None  # None: the stream ends in a failure, without a finish chunk
    ending: Ending
    tool_mode: str
    reasoning_field: ReasoningField
    show_reasoning: bool
    reasoning_details: bool  # usage carries completion_tokens_details (a reasoning parser ran)
    prompt_tokens: int
    cached_tokens: int | None
    persona: Persona = GENERIC
    # vLLM 0.10's closing of a call cut by max_tokens: sent after the cut, not a token.
    tail_args: str = ""
    # vLLM 0.32: the call cut by max_tokens whose argument tokens are generated (and counted)
    # but never streamed, its parser waiting for JSON that never closes; None: none.
    withheld_call: int | None = None
    return_token_ids: bool = False  # the request's `return_token_ids` (0.32 shapes)

    @property
    def completion_tokens(self) -> int:
        return len(self.pieces)

    @property
    def reasoning_tokens(self) -> int:
        return sum(1 for p in self.pieces if p.kind == "reasoning")

    def joined(self, kind: PieceKind) -> str:
        return "".join(p.text for p in self.pieces if p.kind == kind)

    def call_id(self, index: int) -> str:
        return next(p.call_id for p in self.pieces if p.kind == "call" and p.index == index)


def tool_call_id(request_id: str, index: int, *, size: int = 16) -> str:
    """`chatcmpl-tool-` + 2*size hex (vLLM 0.32: 16 hex, size 8; before: 32)."""
    digest = hashlib.blake2b(f"{request_id}/{index}".encode(), digest_size=size).hexdigest()
    return f"chatcmpl-tool-{digest}"


def mistral_call_id(request_id: str, index: int) -> str:
    """Mistral's parser: 9 random alphanumeric characters (here derived from the request)."""
    digest = hashlib.blake2b(f"{request_id}/{index}".encode(), digest_size=16).digest()
    return "".join(_ALNUM[b % len(_ALNUM)] for b in digest[:9])


def plan(req: ChatRequest, config: SimConfig, *, request_id: str, created: int,
         prefix_hits: int = 0) -> Plan:
    persona = req.persona
    reasoning = [Piece("reasoning", t) for t in reasoning_tokens(req)]
    calls = choose_calls(req)
    body = _call_pieces(calls, request_id, persona) if calls else [
        Piece("content", t) for t in answer_tokens(req)
    ]
    if persona.separators and reasoning and body:
        body.insert(0, Piece("content", "\n\n"))  # the text after </think>
    pieces = reasoning + body
    finish: str | None = _natural_finish(req, calls)
    budget = max(0, min(req.max_tokens or config.max_model_len,
                        config.max_model_len - req.prompt_tokens))
    tail = ""
    withheld: int | None = None
    if len(pieces) > budget:
        pieces, finish = pieces[:budget], "length"
        if req.tool_mode != "named" and any(p.kind == "call" for p in pieces):
            # vLLM reports "tool_calls" once the parser streamed a call, even a cut one
            finish = persona.cut_call_finish
            if persona.complete_cut_json and pieces[-1].kind in ("call", "args"):
                tail = close_json(_sent_args(pieces, pieces[-1].index))
        if persona.since_032 and pieces and pieces[-1].kind in ("call", "args"):
            withheld = pieces[-1].index
    ending: Ending = "done"
    fail = req.directives.fail
    if fail is not None and fail.kind != "http":
        pieces = pieces[: fail.at]
        finish = "abort" if fail.kind == "abort" else None
        ending = "done" if fail.kind == "abort" else fail.kind
    d = req.directives
    return Plan(
        request_id=request_id, created=created, model=req.model, pieces=tuple(pieces),
        calls=tuple(calls), finish_reason=finish, ending=ending, tool_mode=req.tool_mode,
        reasoning_field=cast(ReasoningField, d.reasoning_field or persona.reasoning_field
                             or config.reasoning_field),
        show_reasoning=req.include_reasoning,
        reasoning_details=(is_reasoner(req.model) or bool(reasoning))
        if persona.reasoning_details is None else persona.reasoning_details,
        prompt_tokens=req.prompt_tokens, cached_tokens=_cached(d.cached, persona, prefix_hits),
        persona=persona, tail_args=tail, withheld_call=withheld,
        return_token_ids=req.return_token_ids,
    )


def _cached(directive: int | None, persona: Persona, hits: int) -> int | None:
    """prompt_tokens_details.cached_tokens: None leaves prompt_tokens_details out."""
    if persona.prompt_details is None:
        return directive
    if not persona.prompt_details:
        return None
    return directive if directive is not None else hits


def _sent_args(pieces: list[Piece], index: int) -> str:
    return "".join(p.text for p in pieces if p.kind == "args" and p.index == index)


def reasoning_tokens(req: ChatRequest) -> list[str]:
    count = req.directives.reasoning
    if count is None:
        if not (is_reasoner(req.model) or req.persona.reasoner):
            return []
        count = round(REASONER_TOKENS * EFFORT_SCALE[req.reasoning_effort or "medium"])
    if count <= 0:
        return []
    words = itertools.islice(itertools.cycle([*THOUGHT[1:], " " + THOUGHT[0]]), count - 1)
    return [THOUGHT[0], *words]


def answer_tokens(req: ChatRequest) -> list[str]:
    """The content: echo, tool-results summary, or JSON; `tokens=N` sets a text answer's length."""
    if req.response_format == "json_schema":
        return tokens.split(json.dumps(instance(req.json_schema, req.hints)))
    if req.response_format == "json_object":
        return tokens.split(json.dumps({"answer": answer_text(req)}))
    words = tokens.split(answer_text(req))
    wanted = req.directives.tokens
    if wanted is None:
        return words
    filler = itertools.islice(itertools.cycle(FILLER), max(0, wanted - len(words)))
    return (words + list(filler))[:wanted]


def answer_text(req: ChatRequest) -> str:
    quoted = search_answer(req.messages)
    if quoted is not None:  # a web search's results: quote the first, citing it
        return quoted
    results = _tool_results(req.messages, req.persona.tool_author_from_name)
    if results is not None:
        return "Tool results: " + "; ".join(f"{name}={text}" for name, text in results)
    return f"You said: {req.text}"


def _tool_results(messages: list[dict[str, Any]],
                  author_from_name: bool = False) -> list[tuple[str, str]] | None:
    """(function name or call id, output) for the trailing run of tool messages, or None.
    `author_from_name` (gpt-oss up to 0.11): only the message's `name` says which tool
    answered, as harmony's `functions.<name>` author (empty without one)."""
    trailing = list(itertools.takewhile(lambda m: m.get("role") == "tool", reversed(messages)))
    if not trailing:
        return None
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                names[str(call.get("id"))] = str(call["function"].get("name"))
    out = []
    for message in reversed(trailing):
        call_id = str(message.get("tool_call_id", ""))
        name = message.get("name") or ("" if author_from_name
                                        else names.get(call_id) or call_id)
        out.append((str(name), " ".join(tokens.content_text(message.get("content")).split())))
    return out


def _call_pieces(calls: list[Call], request_id: str, persona: Persona) -> list[Piece]:
    pieces: list[Piece] = []
    for index, call in enumerate(calls):
        if index and persona.separators:
            pieces.append(Piece("content", "\n"))  # between two <tool_call> blocks
        call_id = (mistral_call_id(request_id, index) if persona.call_style == "mistral"
                   else tool_call_id(request_id, index, size=8 if persona.since_032 else 16))
        pieces.append(Piece("call", index=index, name=call.name, call_id=call_id))
        pieces.extend(Piece("args", t, index=index) for t in tokens.split(call.arguments))
    return pieces


def _natural_finish(req: ChatRequest, calls: list[Call]) -> str:
    if calls:
        # vLLM: "tool_calls" for auto/required, "stop" for a named tool_choice.
        return "stop" if req.tool_mode == "named" else "tool_calls"
    return req.directives.finish or "stop"
