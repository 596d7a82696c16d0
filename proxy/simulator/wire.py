"""vLLM's OpenAI-server shapes: stream chunks, the completion object, usage, the model list.

Checked against vLLM's `protocol.py` / `chat_completion/serving.py` (see
tests/unit/golden/vllm_shapes.json for what was verified and where this deliberately differs).
Stream chunks are what pydantic's `model_dump_json(exclude_unset=True)` gives: only the keys
vLLM sets, in field order. The completion object is a full `model_dump()`: every field, nulls
included. Key order matters to byte-level comparisons, so every dict here is built in vLLM's
field order.

Where the finish reason rides (as vLLM's engine reports it with the last token), for the
generic model: on the last content or reasoning chunk; on a separate `{"content": ""}` chunk
after tool calls, after an abort, or when nothing was generated. A persona's deltas and finish
chunk are shaped by deltas.py.
"""

from __future__ import annotations

import hashlib
from typing import Any

from proxy.simulator import tokens
from proxy.simulator.answer import deltas
from proxy.simulator.answer.personas import HARMONY_STOP
from proxy.simulator.answer.script import Plan

OBJECT_CHUNK = "chat.completion.chunk"
# A frame's pacing slot: the token index whose deadline it waits for.
Frame = tuple[int, dict[str, Any] | str]


def usage(prompt: int, completion: int, *, reasoning: int | None = None,
          cached: int | None = None, full: bool = False) -> dict[str, Any]:
    """vLLM's `UsageInfo`. `full` adds the null `prompt_tokens_details` of a `model_dump()`."""
    out: dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                           "completion_tokens": completion}
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    elif full:
        out["prompt_tokens_details"] = None
    if reasoning is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


def chunk(plan: Plan, delta: dict[str, Any], finish: str | None = None,
          tokens_of: list[str] | None = None) -> dict[str, Any]:
    """`tokens_of`: the tokens this chunk streams (vLLM 0.32 gives every chunk after the
    first their `token_ids`); None: the first chunk, which has none."""
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None,
                              "finish_reason": finish}
    if finish is not None:
        # harmony reports the token that ended the turn; the other parsers null
        choice["stop_reason"] = (HARMONY_STOP.get(finish)
                                 if plan.persona.call_style == "harmony" else None)
    if plan.persona.since_032 and tokens_of is not None:
        choice["token_ids"] = ([token_id(t) for t in tokens_of] if plan.return_token_ids
                               else None)
    return {"id": plan.request_id, "object": OBJECT_CHUNK, "created": plan.created,
            "model": plan.model, "choices": [choice]}


def token_id(token: str) -> int:
    """A stand-in vocabulary id for a simulated token: a pure function of its text."""
    return int.from_bytes(hashlib.blake2b(token.encode(), digest_size=4).digest()) % 151_000


def fingerprint(plan: Plan) -> str:
    """vLLM 0.32's `system_fingerprint`: its version and a per-deployment hash."""
    digest = hashlib.blake2b(plan.model.encode(), digest_size=4).hexdigest()
    return f"vllm-0.32.0-{digest}"


def _first(plan: Plan) -> dict[str, Any]:
    frame = chunk(plan, deltas.role_delta(plan))
    if plan.persona.since_032:  # vLLM 0.32: the prompt's ids, when `return_token_ids`
        frame["prompt_token_ids"] = ([token_id(str(i)) for i in range(plan.prompt_tokens)]
                                     if plan.return_token_ids else None)
        frame["prompt_text"] = None
    return frame


def stream_frames(plan: Plan, *, include_usage: bool, continuous: bool) -> list[Frame]:
    """Every frame of the stream in order, each with its pacing slot (deltas.py shapes them)."""
    frames: list[Frame] = [(0, _with_usage(_first(plan), plan, 0, continuous))]
    withheld = plan.withheld_call
    sent = [(i, p) for i, p in enumerate(plan.pieces)
            if (p.kind != "reasoning" or plan.show_reasoning)
            and not (p.kind == "args" and p.index == withheld)]
    grouped = deltas.steps(plan, sent)
    rides = (plan.finish_reason is not None and bool(grouped)
             and grouped[-1][-1][0] == len(plan.pieces) - 1 and plan.finish_reason != "abort"
             and deltas.rides_on(plan, grouped[-1]))
    for n, step in enumerate(grouped):
        finish = plan.finish_reason if rides and n == len(grouped) - 1 else None
        index = step[-1][0]
        frame = chunk(plan, deltas.step_delta(plan, step), finish, [p.text for _, p in step])
        frames.append((index, _with_usage(frame, plan, index + 1, continuous)))
    last = max(len(plan.pieces) - 1, 0)
    if plan.ending == "error":
        frames += [(last, error_frame(plan)), (last, "[DONE]")]
        return frames
    if plan.ending != "done":
        return frames
    if plan.finish_reason is not None and not rides:
        end = chunk(plan, deltas.finish_delta(plan), plan.finish_reason, [])
        frames.append((last, _with_usage(end, plan, len(plan.pieces), continuous)))
    if include_usage:
        tail: dict[str, Any] = {"id": plan.request_id, "object": OBJECT_CHUNK,
                                "created": plan.created, "model": plan.model, "choices": [],
                                "usage": plan_usage(plan, len(plan.pieces))}
        if plan.persona.since_032:
            tail["system_fingerprint"] = fingerprint(plan)
        frames.append((last, tail))
    elif plan.persona.since_032 and isinstance(frames[-1][1], dict):
        frames[-1][1]["system_fingerprint"] = fingerprint(plan)  # on the last chunk instead
    frames.append((last, "[DONE]"))
    return frames


def error_frame(plan: Plan) -> dict[str, Any]:
    """vLLM's in-band error (HTTP status already 200): `data: {"error": {...}}`."""
    return {"error": {"message": f"Simulated engine failure after {len(plan.pieces)} tokens "
                                 "(fail=error).",
                      "type": "InternalServerError", "param": None, "code": 500}}


def plan_usage(plan: Plan, completion: int, *, full: bool = False) -> dict[str, Any]:
    reasoning = sum(1 for p in plan.pieces[:completion] if p.kind == "reasoning")
    return usage(plan.prompt_tokens, completion, cached=plan.cached_tokens, full=full,
                 reasoning=reasoning if plan.reasoning_details else None)


def completion(plan: Plan) -> dict[str, Any]:
    """vLLM's non-streaming `chat.completion` object (a full `model_dump()`)."""
    calls = _complete_calls(plan)
    content: str | None = plan.joined("content")
    if calls and plan.persona.separators:
        # the hermes parser's content is the text before the first <tool_call>
        first = next(i for i, p in enumerate(plan.pieces) if p.kind == "call")
        content = "".join(p.text for p in plan.pieces[:first] if p.kind == "content")
    if calls and not content:
        # vLLM: "" when tool_choice forced the call (named/required), null for auto.
        content = "" if plan.tool_mode in ("named", "required") else None
    message: dict[str, Any] = {
        "role": "assistant", "content": content, "refusal": None, "annotations": None,
        "audio": None, "function_call": None, "tool_calls": calls,
        **deltas.reasoning_fields(plan, (plan.joined("reasoning") or None)
                                  if plan.show_reasoning else None),
    }
    finish = plan.finish_reason or "stop"
    if finish == "tool_calls" and not calls:
        finish = "length"  # a cut call no parser extracted: vLLM reports the engine's reason
    choice = {"index": 0, "message": message, "logprobs": None,
              "finish_reason": finish, "stop_reason": None}
    if plan.persona.since_032:
        return _completion_032(plan, message, choice)
    return {"id": plan.request_id, "object": "chat.completion", "created": plan.created,
            "model": plan.model, "choices": [choice], "service_tier": None,
            "system_fingerprint": None,
            "usage": plan_usage(plan, len(plan.pieces), full=True),
            "prompt_logprobs": None, "kv_transfer_params": None}


def _completion_032(plan: Plan, message: dict[str, Any],
                    choice: dict[str, Any]) -> dict[str, Any]:
    """vLLM 0.32's `chat.completion`: `tool_calls` only when there are calls, `token_ids` and
    `routed_experts` on the choice, and the extension fields at the top."""
    if not message["tool_calls"]:
        del message["tool_calls"]
    choice["token_ids"] = ([token_id(p.text) for p in plan.pieces] if plan.return_token_ids
                           else None)
    choice["routed_experts"] = None
    usage = plan_usage(plan, len(plan.pieces), full=True)
    usage.setdefault("completion_tokens_details", None)
    return {"id": plan.request_id, "object": "chat.completion", "created": plan.created,
            "model": plan.model, "choices": [choice], "service_tier": None,
            "system_fingerprint": fingerprint(plan), "usage": usage,
            "prompt_logprobs": None,
            "prompt_token_ids": ([token_id(str(i)) for i in range(plan.prompt_tokens)]
                                 if plan.return_token_ids else None),
            "prompt_text": None, "kv_transfer_params": None, "ec_transfer_params": None,
            "metrics": None}


def models_list(names: tuple[str, ...], *, created: int, max_model_len: int) -> dict[str, Any]:
    """vLLM's `ModelList`. Ids and `created` are fixed per process (vLLM makes new ones on every
    call) so that a proxy's cached copy of the list equals a fresh one."""
    return {"object": "list", "data": [_model_card(n, created, max_model_len) for n in names]}


def _model_card(name: str, created: int, max_model_len: int) -> dict[str, Any]:
    perm = hashlib.blake2b(name.encode(), digest_size=16).hexdigest()
    permission = {"id": f"modelperm-{perm}", "object": "model_permission", "created": created,
                  "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                  "allow_search_indices": False, "allow_view": True,
                  "allow_fine_tuning": False, "organization": "*", "group": None,
                  "is_blocking": False}
    return {"id": name, "object": "model", "created": created, "owned_by": "vllm",
            "root": name, "parent": None, "max_model_len": max_model_len,
            "permission": [permission]}


def _with_usage(frame: dict[str, Any], plan: Plan, completion: int,
                continuous: bool) -> dict[str, Any]:
    if continuous:
        frame["usage"] = plan_usage(plan, completion)
    return frame


def _complete_calls(plan: Plan) -> list[dict[str, Any]]:
    """The calls whose arguments were generated in full (a call cut by max_tokens is dropped,
    as vLLM's parsers drop an unterminated call)."""
    out = []
    for index, call in enumerate(plan.calls):
        sent = sum(1 for p in plan.pieces if p.kind == "args" and p.index == index)
        if sent == len(tokens.split(call.arguments)):
            out.append({"id": plan.call_id(index), "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments}})
    return out


# vLLM's load gauges under its own names (the proxy's fleet scrapes them). The simulator has no
# scheduler queue (every request starts at once) and no KV cache: waiting and usage are a
# truthful 0; running counts the chat requests being answered, per served model.
_METRICS = (
    ("vllm:num_requests_running", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
)


def metrics_text(running: dict[str, int]) -> str:
    """Prometheus text exposition of the three gauges, one sample per model."""
    lines: list[str] = []
    for name, doc in _METRICS:
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge"]
        for model, count in running.items():
            value = count if name == "vllm:num_requests_running" else 0
            lines.append(f'{name}{{model_name="{model}"}} {float(value)}')
    return "\n".join(lines) + "\n"
