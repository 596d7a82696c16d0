"""Token logprobs as vLLM sends them (`logprobs: true`, `top_logprobs: k`), deterministic.

vLLM's shape (protocol.py `ChatCompletionLogProbs`, serving_chat.py `_create_chat_logprobs`):
every chunk that generated tokens carries `choices[0].logprobs = {"content": [entry per token]}`
whatever the parsers made of those tokens (content, reasoning, tool-call text: vLLM computes
the logprobs before the reasoning and tool parsers split the text); an entry is `{token,
logprob, bytes, top_logprobs}` and `top_logprobs` lists k alternatives `{token, logprob,
bytes}`, the sampled token first (the engine's dict puts it there). The non-streaming answer
carries one entry per generated token in `choices[0].logprobs.content`.

Values are a pure function of the token (a hash): the same text always gets the same numbers.
Checks, as vLLM makes them: `top_logprobs` < 0 (but -1) and > 0 without `logprobs: true` are
schema errors; more than the engine's `max_logprobs` (20; -1 means the whole vocabulary) is
refused when serving: by vLLM 0.32 in a streamed answer's first frame, after a 200
(`AboveMax`, app.py; `make e2e-vllm` showed it), before answering otherwise.
"""

from __future__ import annotations

import hashlib
from typing import Any

from proxy.simulator.answer.script import Piece, Plan
from proxy.simulator.errors import SimError, invalid, trailer

MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
_ALTERNATIVES = (" the", " a", ",", ".", " and", " of", " to", " is", " in", " it", "\n",
                 " that", " I", " you", " for", " on", " with", " as", " this", " be", " at")


class AboveMax(SimError):
    """More alternatives than the engine's `max_logprobs`: a check made while serving."""


def requested(body: Any, *, since_032: bool = False,
              most: int = MAX_LOGPROBS) -> int | None:
    """How many alternatives per token (0-`most`) when `logprobs: true`; None when not asked.
    `since_032`: vLLM 0.32 names the bound's field `logprobs`, with its trailer."""
    if not isinstance(body, dict):
        return None
    flag, top = body.get("logprobs"), body.get("top_logprobs")
    if flag is not None and not isinstance(flag, bool):
        raise invalid("`logprobs` should be a valid bool", param="logprobs")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int)):
        raise invalid("`top_logprobs` should be a valid int", param="top_logprobs")
    if top is not None and top < 0 and top != -1:
        raise invalid("`top_logprobs` must be a positive value or -1.", param="top_logprobs")
    if top is not None and top != 0 and not flag:
        raise invalid("when using `top_logprobs`, `logprobs` must be set to true.",
                      param="top_logprobs")
    if not flag:
        return None
    top = top or 0
    if top == -1 or top > most:
        message = f"Requested sample logprobs of {top}, which is greater than max allowed: " \
                  f"{most}"
        if since_032:
            raise AboveMax(400, message + trailer("logprobs", top), param="logprobs")
        raise AboveMax(400, message, param="top_logprobs")
    return top


def entry(token: str, top: int) -> dict[str, Any]:
    """One token's entry, `top` alternatives (the token itself first)."""
    logprob = _value(token, 0.0)
    alternatives = [{"token": token, "logprob": logprob, "bytes": _bytes(token)}]
    start = int.from_bytes(_digest(token)[4:6], "big")
    n, floor = 0, logprob
    while len(alternatives) < top and n < len(_ALTERNATIVES):  # bounded: 21 candidates
        other = _ALTERNATIVES[(start + n) % len(_ALTERNATIVES)]
        n += 1
        if other != token:
            floor = _value(other, floor - 0.25)
            alternatives.append({"token": other, "logprob": floor, "bytes": _bytes(other)})
    return {"token": token, "logprob": logprob, "bytes": _bytes(token),
            "top_logprobs": alternatives[:top]}


def attach_stream(frames: list[Any], plan: Plan, top: int) -> None:
    """Every frame that brings a generated token gets that token's entry (a frame's slot is
    the index of its piece, wire.stream_frames)."""
    for slot, frame in frames:
        if not isinstance(frame, dict) or not frame.get("choices"):
            continue
        choice = frame["choices"][0]
        if _generated(choice.get("delta") or {}) and slot < len(plan.pieces):
            choice["logprobs"] = {"content": [entry(_piece_text(plan.pieces[slot]), top)]}


def attach_completion(body: dict[str, Any], plan: Plan, top: int) -> None:
    """The non-streaming answer: one entry per generated token."""
    body["choices"][0]["logprobs"] = {"content": [entry(_piece_text(p), top)
                                                  for p in plan.pieces]}


def _generated(delta: dict[str, Any]) -> bool:
    """A delta that carries a token (not the role chunk, not the closing `content: ""`)."""
    if "role" in delta:
        return False
    return bool(delta.get("content") or delta.get("reasoning") or delta.get("reasoning_content")
                or delta.get("tool_calls"))


def _piece_text(piece: Piece) -> str:
    # A call piece streams its name: the tokens that named the function.
    return piece.text or piece.name


def _digest(token: str) -> bytes:
    return hashlib.blake2b(token.encode(), digest_size=8).digest()


def _value(token: str, ceiling: float) -> float:
    """A logprob at or below `ceiling`, fixed for `token`: in (ceiling - 3, ceiling]."""
    fraction = int.from_bytes(_digest(token)[:4], "big") / 2**32
    return round(ceiling - 3 * fraction, 4)


def _bytes(token: str) -> list[int]:
    return list(token.encode("utf-8", errors="replace"))
