"""Personas: what one model family behind vLLM's parsers, at one vLLM version, sends. Pure.

A persona is the model family plus the parsers a real deployment runs it with (qwen3: `hermes`
tool parser and `qwen3` reasoning parser; mistral: `mistral`; gpt-oss: the harmony path;
deepseek-r1: `deepseek_r1` reasoning; llama3: `llama3_json`). The shapes are those of
tests/unit/golden/vllm/*.sse (reconstructed from vLLM's source); the version ranges are those of
docs/protocol.md, section 8:

  - reasoning delta key: `reasoning_content` up to 0.11; both keys 0.12-0.15, every delta then
    carrying `reasoning_content` (null where empty); `reasoning` only from 0.16;
  - a tool call cut by max_tokens is reported with finish_reason `tool_calls` before 0.20
    (mid-2026); 0.10's parsers also complete the cut JSON in a last fragment;
  - `reasoning_effort` is low/medium/high only on 0.10 (every model) and for gpt-oss (always);
  - gpt-oss on 0.10 refuses an assistant message with `content: null` beside tool_calls, and
    up to 0.11 takes a tool result's author from the tool message's `name` (PR #28729);
  - an `X-Request-Id` already in flight fails before 0.12 (PR #27987, Nov 2025);
  - `completion_tokens_details.reasoning_tokens` only from 0.16, with a reasoning parser;
  - `prompt_tokens_details` only with `--enable-prompt-tokens-details`.

  - 0.32 (captured from a real vLLM 0.32.0, tests/fixtures/vllm/real-0.32/; `since_032`):
    the first chunk carries `prompt_token_ids`/`prompt_text` and every later choice
    `token_ids` (null unless the request sets `return_token_ids`); the finish of a stop comes
    alone with `delta: {}` (a length cut rides on its last token); call heads have no
    `arguments` key and ids are `chatcmpl-tool-` + 16 hex; a forced (named/required) call's
    deltas start with `content: null` (not llama3_json's); llama3_json ends its calls with an
    empty fragment carrying the finish; a call cut by max_tokens streams only its name; the
    usage chunk (or, without one, the last chunk) carries `system_fingerprint`; errors name
    vLLM's field in `param` and end `(parameter=X, value=Y)`; a prompt + max_tokens past the
    context is accepted (the answer stops at the context), max_tokens alone past it is not.

`GENERIC` (no persona, no version) is the simulator as it always was, except that it sends 0.32's
shapes and makes 0.32's checks (`NEWEST`): what the fleet sends today is what `make test`
exercises. Every other rule above that would change an existing test's answer is off there; a
test of an older shape names its version (`--vllm-version 0.31` gives the shapes before 0.32).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

CallStyle = Literal["sim", "hermes", "mistral", "harmony"]
Version = tuple[int, int]

PERSONAS = ("qwen3", "mistral", "gpt-oss", "deepseek-r1", "llama3")
# A persona run without --vllm-version behaves as this version (the first 2026 builds).
DEFAULT_VERSION: Version = (0, 16)
# (a fragment of the lower-cased served name, its persona), first match wins: a simulator can
# serve realistic names, one per persona, without --persona.
NAME_FRAGMENTS = (("gpt-oss", "gpt-oss"), ("deepseek-r1", "deepseek-r1"), ("qwen3", "qwen3"),
                  ("qwq", "qwen3"), ("mistral", "mistral"), ("llama", "llama3"))
THREE_EFFORTS = ("low", "medium", "high")
# Harmony's special tokens that end a turn, reported as `stop_reason` (vLLM gives the token id).
HARMONY_STOP = {"tool_calls": 200012, "stop": 200002}


@dataclass(frozen=True)
class Persona:
    name: str | None = None  # None: the generic simulator model
    version: Version | None = None  # None: no version effects
    reasoner: bool = False  # runs with a reasoning parser and reasons by default
    reasoning_field: str | None = None  # None: the config's (or a directive's)
    null_reasoning_content: bool = False  # 0.12-0.15: `reasoning_content: null` on every delta
    separators: bool = False  # "\n\n" content after the reasoning, "\n" between calls
    call_style: CallStyle = "sim"
    tokens_per_step: int = 1  # tokens per engine step: one delta carries them all (harmony)
    finish_alone: bool = False  # the finish reason comes on its own chunk, never on a token's
    finish_on_args: bool = False  # llama3_json: the last argument fragment carries the finish
    efforts: tuple[str, ...] | None = None  # the `reasoning_effort` values taken; None: all
    null_content_history_400: bool = False  # gpt-oss on 0.10
    tool_author_from_name: bool = False  # gpt-oss up to 0.11: a tool result's author is its name
    cut_call_finish: str = "length"  # the finish of an answer cut inside a tool call
    complete_cut_json: bool = False  # 0.10: the cut arguments are closed into valid JSON
    unique_request_ids: bool = False  # an X-Request-Id in flight fails the second request
    reasoning_details: bool | None = None  # usage's completion_tokens_details; None: as ever
    prompt_details: bool | None = None  # usage's prompt_tokens_details; None: as ever
    since_032: bool = False  # vLLM 0.32's chunk shapes and request checks (module docstring)
    null_content_calls: bool = False  # 0.32, not llama3_json: forced calls' `content: null`

    @property
    def versioned(self) -> bool:
        return self.version is not None


# The newest real vLLM the simulator was checked against (tests/fixtures/vllm/real-0.32/).
NEWEST: Version = (0, 32)
GENERIC = Persona(call_style="hermes", since_032=True, null_content_calls=True)
# The generic model as it was before 0.32's shapes: `SimConfig.legacy_shapes`, or any
# --vllm-version before 0.32 (with that version's effects).
LEGACY = Persona()


def parse_version(text: str) -> Version:
    """'0.10', '0.10.1' or 'v0.16' -> (major, minor); ValueError otherwise."""
    parts = text.strip().lstrip("v").split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise ValueError(f"a vLLM version is X.Y (e.g. 0.10), not {text!r}")
    return int(parts[0]), int(parts[1])


def persona_of(model: str, configured: str | None) -> str | None:
    """The configured persona, else the one the served name matches, else None."""
    if configured is not None:
        return configured
    name = model.lower()
    return next((p for fragment, p in NAME_FRAGMENTS if fragment in name), None)


def resolve(name: str | None, version: Version | None, *, prompt_details: bool,
            reasoner: bool, legacy: bool = False) -> Persona:
    """The behaviour of one served model. `reasoner`: the generic rule (a name with
    "reason") for a model without a persona. `legacy`: the generic model's shapes before
    0.32 (`SimConfig.legacy_shapes`)."""
    if name is None and version is None:
        generic = LEGACY if legacy else GENERIC
        return replace(generic, prompt_details=True) if prompt_details else generic
    v = version or DEFAULT_VERSION
    base = _FAMILIES[name] if name is not None else replace(LEGACY, reasoner=reasoner)
    if v >= NEWEST:
        base = replace(base, since_032=True, null_content_calls=base.call_style == "sim",
                       call_style="hermes" if base.call_style == "sim" else base.call_style)
    field = ("reasoning_content" if v <= (0, 11) else "both" if v <= (0, 15) else "reasoning")
    efforts = THREE_EFFORTS if v <= (0, 10) or name == "gpt-oss" else None
    return replace(
        base, version=v, reasoning_field=field, null_reasoning_content=field == "both",
        efforts=efforts,
        null_content_history_400=name == "gpt-oss" and v <= (0, 10),
        tool_author_from_name=name == "gpt-oss" and v <= (0, 11),
        cut_call_finish="tool_calls" if v < (0, 20) else "length",
        complete_cut_json=v <= (0, 10), unique_request_ids=v <= (0, 11),
        reasoning_details=base.reasoner and v >= (0, 16), prompt_details=prompt_details)


_FAMILIES = {
    "qwen3": Persona(name="qwen3", reasoner=True, separators=True, call_style="hermes",
                     finish_alone=True),
    "deepseek-r1": Persona(name="deepseek-r1", reasoner=True, separators=True,
                           call_style="hermes", finish_alone=True),
    "mistral": Persona(name="mistral", call_style="mistral", finish_alone=True),
    "gpt-oss": Persona(name="gpt-oss", reasoner=True, call_style="harmony", tokens_per_step=3),
    "llama3": Persona(name="llama3", call_style="hermes", finish_on_args=True),
}


def close_json(prefix: str) -> str:
    """What vLLM 0.10's partial-JSON parsing adds to arguments cut mid-way so that they parse:
    the open string's quote, then the open arrays' and objects' closers."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in prefix:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    tail = ('\\' if escaped else "") + ('"' if in_string else "")
    return tail + "".join(reversed(stack))
