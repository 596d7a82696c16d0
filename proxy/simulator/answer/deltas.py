"""Planned tokens as stream deltas, in the shape the persona's parsers write them. Pure.

One delta per engine step: a step is one token, or `tokens_per_step` of them for harmony
(gpt-oss), whose one delta then carries content, reasoning and tool-call fragments together, in
that key order (../shared/vllm/harmony_mixed_delta.sse). Mistral's parser sends a call's name
with its first argument fragment, so a call token never ends a step there.

Tool-call shapes by style (../shared/vllm/*.sse):
  - sim (the generic model): `{index, id, type, function: {name, arguments: ""}}`, then
    `{index, function: {arguments}}`;
  - hermes (also llama3_json, deepseek): `{id, type, index, function: {name}}`, then
    `{index, function: {arguments}}`;
  - harmony: `{id, type, index, function: {name, arguments: ""}}`, then as hermes;
  - mistral: `{id (9 alphanumerics), type, index, function: {name, arguments}}`, then
    `{id: null, type, index, function: {arguments}}`.
"""

from __future__ import annotations

from typing import Any

from proxy.simulator.answer.script import Piece, Plan

Step = list[tuple[int, Piece]]  # (token index, piece)


def steps(plan: Plan, sent: list[tuple[int, Piece]]) -> list[Step]:
    size = plan.persona.tokens_per_step
    glue_call = plan.persona.call_style == "mistral"
    out: list[Step] = []
    current: Step = []
    for index, piece in sent:
        current.append((index, piece))
        if len(current) >= size and not (glue_call and piece.kind == "call"):
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


def step_delta(plan: Plan, step: Step) -> dict[str, Any]:
    content = "".join(p.text for _, p in step if p.kind == "content")
    reasoning = "".join(p.text for _, p in step if p.kind == "reasoning")
    calls: list[dict[str, Any]] = []
    for _, piece in step:
        if piece.kind == "call":
            calls.append(_head(plan, piece))
        elif piece.kind == "args":
            if calls and calls[-1]["index"] == piece.index:
                function = calls[-1]["function"]
                function["arguments"] = function.get("arguments", "") + piece.text
            else:
                calls.append(_fragment(plan, piece))
    delta: dict[str, Any] = {}
    if any(p.kind == "content" for _, p in step):
        delta["content"] = content
    if reasoning or any(p.kind == "reasoning" for _, p in step):
        delta.update(reasoning_fields(plan, reasoning))
    return _with_calls(plan, delta, calls)


def role_delta(plan: Plan) -> dict[str, Any]:
    return _with_calls(plan, {"role": "assistant", "content": ""}, [])


def finish_delta(plan: Plan) -> dict[str, Any]:
    """The delta of a finish reason on its own chunk."""
    if plan.persona.since_032:
        # llama3_json ends a whole call with an empty fragment, the finish riding on it
        last = plan.pieces[-1] if plan.pieces else None
        if (plan.persona.finish_on_args and last is not None and last.kind == "args"
                and last.index != plan.withheld_call and plan.finish_reason != "abort"):
            return _with_calls(plan, {}, [_fragment(plan, Piece("args", "",
                                                                index=last.index))])
        if plan.persona.finish_on_args and plan.tool_mode == "auto" and last is not None \
                and last.kind == "content":
            return {"content": ""}  # llama3_json's text path writes one on the stop token
        return {}
    if plan.tail_args:  # vLLM 0.10 sends the closing of a cut call with the finish
        index = max(p.index for p in plan.pieces if p.kind in ("call", "args"))
        return _with_calls(plan, {}, [_fragment(plan, Piece("args", plan.tail_args,
                                                            index=index))])
    style = plan.persona.call_style
    return _with_calls(plan, {} if style in ("mistral", "harmony") else {"content": ""}, [])


def rides_on(plan: Plan, step: Step) -> bool:
    """Whether the finish reason can ride on this (the last) step's chunk."""
    persona = plan.persona
    last = step[-1][1]
    if plan.tail_args:
        return False
    if persona.since_032:  # a stop token streams nothing: only a length cut rides
        return plan.finish_reason == "length" and last.kind in ("content", "reasoning")
    if persona.finish_on_args and last.kind == "args":
        return True
    return not persona.finish_alone and last.kind in ("content", "reasoning")


def reasoning_fields(plan: Plan, text: str | None) -> dict[str, Any]:
    if plan.reasoning_field == "both":
        return {"reasoning": text, "reasoning_content": text}
    return {plan.reasoning_field: text}


def _with_calls(plan: Plan, delta: dict[str, Any],
                calls: list[dict[str, Any]]) -> dict[str, Any]:
    if plan.persona.null_reasoning_content and "reasoning_content" not in delta:
        delta["reasoning_content"] = None  # vLLM 0.12-0.15 sets it on every delta
    if calls:
        if plan.persona.null_content_calls and plan.tool_mode in ("named", "required") \
                and "content" not in delta:
            delta = {"content": None, **delta}  # vLLM 0.32's forced calls
        delta["tool_calls"] = calls
    return delta


def _head(plan: Plan, piece: Piece) -> dict[str, Any]:
    style = plan.persona.call_style
    if style == "sim":
        return {"index": piece.index, "id": piece.call_id, "type": "function",
                "function": {"name": piece.name, "arguments": ""}}
    function: dict[str, Any] = {"name": piece.name}
    if style in ("harmony", "mistral"):
        function["arguments"] = ""
    return {"id": piece.call_id, "type": "function", "index": piece.index,
            "function": function}


def _fragment(plan: Plan, piece: Piece) -> dict[str, Any]:
    if plan.persona.call_style == "mistral":
        return {"id": None, "type": "function", "index": piece.index,
                "function": {"arguments": piece.text}}
    return {"index": piece.index, "function": {"arguments": piece.text}}
