"""`[[sim key=value ...]]`: how a test steers one answer from inside its prompt.

A directive block may appear anywhere in a user message, several blocks merge (a later key wins),
and the text the simulator echoes has every block removed and its whitespace collapsed. An
unknown key or a bad value is an error (the request gets a 400) rather than being ignored: a typo
in a test should fail loudly, not silently run the default. Every number has an upper bound so
no directive can make the simulator hang or allocate without limit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Literal

FailKind = Literal["http", "error", "stall", "cut", "abort"]

_BLOCK = re.compile(r"\[\[sim(?P<body>(?:\s[^\]]*)?)\]\]", re.IGNORECASE)

MAX_TOKENS = 1_000_000
MAX_DELAY_MS = 60_000.0
MAX_TTFT_MS = 600_000.0
MAX_TOOLS = 64
FINISH_REASONS = ("stop", "length", "content_filter")
REASONING_FIELDS = ("reasoning", "reasoning_content", "both")
TOOL_ARGS = ("all", "required")
_COUNTED: dict[str, FailKind] = {"error": "error", "stall": "stall", "cut": "cut", "abort": "abort"}


class DirectiveError(ValueError):
    pass


@dataclass(frozen=True)
class Failure:
    kind: FailKind
    # HTTP status for "http"; otherwise the number of generated tokens sent before failing.
    at: int


@dataclass(frozen=True)
class Directives:
    tokens: int | None = None
    delay_ms: float | None = None
    ttft_ms: float | None = None
    reasoning: int | None = None
    reasoning_field: str | None = None
    tools: int | None = None
    fail: Failure | None = None
    finish: str | None = None
    cached: int | None = None
    # Which properties tool-call arguments carry: `all` declared ones (default) or only the
    # `required` ones, as a real model mostly does; real clients (Codex's `exec_command`) take
    # an optional "sim" for a shell binary or a directory and fail.
    args: str | None = None
    # Call this offered tool (by its function name upstream), with `call_args` (a JSON object
    # written without spaces) or else a schema instance; only while the last message is not a
    # tool result, so a tool loop's next turn answers in text.
    call: str | None = None
    call_args: str | None = None


def strip(text: str) -> str:
    """`text` without directive blocks, whitespace collapsed to single spaces."""
    return " ".join(_BLOCK.sub(" ", text).split())


def parse(text: str) -> Directives:
    """Every directive block of `text`, merged left to right."""
    found = Directives()
    for match in _BLOCK.finditer(text):
        for pair in match.group("body").split():
            key, sep, value = pair.partition("=")
            if not sep or not value:
                raise DirectiveError(f"simulator directive `{pair}` is not key=value")
            found = _apply(found, key.lower(), value)
    return found


def _apply(found: Directives, key: str, value: str) -> Directives:
    if key == "tokens":
        return replace(found, tokens=_int(key, value, 0, MAX_TOKENS))
    if key == "reasoning":
        return replace(found, reasoning=_int(key, value, 0, MAX_TOKENS))
    if key == "cached":
        return replace(found, cached=_int(key, value, 0, MAX_TOKENS))
    if key == "tools":
        return replace(found, tools=_int(key, value, 0, MAX_TOOLS))
    if key == "delay_ms":
        return replace(found, delay_ms=_float(key, value, MAX_DELAY_MS))
    if key == "ttft_ms":
        return replace(found, ttft_ms=_float(key, value, MAX_TTFT_MS))
    if key == "reasoning_field":
        return replace(found, reasoning_field=_choice(key, value, REASONING_FIELDS))
    if key == "finish":
        return replace(found, finish=_choice(key, value, FINISH_REASONS))
    if key == "fail":
        return replace(found, fail=_failure(value))
    if key == "args":
        return replace(found, args=_choice(key, value, TOOL_ARGS))
    if key in ("call", "call_args"):
        return _call(found, key, value)
    raise DirectiveError(f"unknown simulator directive `{key}`")


def _call(found: Directives, key: str, value: str) -> Directives:
    if key == "call":
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", value):
            raise DirectiveError("simulator directive `call` needs a tool name")
        return replace(found, call=value)
    try:
        parsed = json.loads(value)
    except ValueError:
        raise DirectiveError("simulator directive `call_args` needs a JSON object without "
                             "spaces") from None
    if not isinstance(parsed, dict):
        raise DirectiveError("simulator directive `call_args` needs a JSON object")
    return replace(found, call_args=json.dumps(parsed))


def _failure(value: str) -> Failure:
    kind, _, arg = value.partition(":")
    if kind == "http":
        return Failure("http", _int("fail=http", arg, 400, 599))
    if kind in _COUNTED:
        return Failure(_COUNTED[kind], _int(f"fail={kind}", arg or "0", 0, MAX_TOKENS))
    raise DirectiveError(f"unknown failure `{value}` (http:S, error:K, stall:K, cut:K, abort:K)")


def _int(key: str, value: str, low: int, high: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise DirectiveError(f"simulator directive `{key}` needs an integer, got `{value}`") \
            from None
    if not low <= number <= high:
        raise DirectiveError(f"simulator directive `{key}` must be in [{low}, {high}]")
    return number


def _float(key: str, value: str, high: float) -> float:
    try:
        number = float(value)
    except ValueError:
        raise DirectiveError(f"simulator directive `{key}` needs a number, got `{value}`") from None
    if not 0 <= number <= high:
        raise DirectiveError(f"simulator directive `{key}` must be in [0, {high:g}]")
    return number


def _choice(key: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise DirectiveError(f"simulator directive `{key}` must be one of {', '.join(allowed)}")
    return value
