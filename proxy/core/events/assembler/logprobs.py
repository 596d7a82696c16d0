"""vLLM's token logprobs as the Responses API carries them on output text.

Only read when the request included `message.output_text.logprobs` (vLLM sends `"logprobs":
null` otherwise, and the assembler's hot path looks no further). Three shapes:

    vLLM chunk   choices[0].logprobs.content[i] = {token, logprob, bytes, top_logprobs: [
                 {token, logprob, bytes}]}  (every token of the chunk, whatever the parser made
                 of it: reasoning, content, tool-call text)
    part         output_text.logprobs[i] = {token, bytes, logprob, top_logprobs: [{token,
                 bytes, logprob}]}  (the SDK's ResponseOutputText Logprob)
    event        output_text.delta / .done logprobs[i] = {token, logprob, top_logprobs: [
                 {token, logprob}]}  (the SDK's ResponseTextDeltaEvent Logprob: no bytes)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Logprob = dict[str, Any]


def content_logprobs(logprobs: Any, content: str, delta: dict[str, Any]) -> list[Logprob]:
    """The part-shaped logprobs of `content`, the text this chunk adds to the message. A delta
    that also carries reasoning or tool-call text (harmony: several tokens per step) has
    logprobs for all of its tokens: only the run spelling `content` is the message's."""
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(entries, list):
        return []
    if delta.get("reasoning") or delta.get("reasoning_content") or delta.get("tool_calls"):
        entries = _spelling(entries, content)
    return [_part_entry(e) for e in entries if isinstance(e, dict)]


def event_logprobs(logprobs: Iterable[Logprob]) -> list[Logprob]:
    """Part-shaped logprobs as a text event carries them."""
    return [{"token": e["token"], "logprob": e["logprob"],
             "top_logprobs": [{"token": a["token"], "logprob": a["logprob"]}
                              for a in e["top_logprobs"]]} for e in logprobs]


def from_event(logprobs: Any) -> list[Logprob]:
    """A logged event's logprobs back in the part's shape (a response restored from its event
    log, core/events/assembler/restore.py): `bytes` are the token's UTF-8 (vLLM's own
    differ only for a token that splits a character)."""
    if not isinstance(logprobs, list):
        return []
    return [_part_entry(e) for e in logprobs if isinstance(e, dict)]


def _part_entry(entry: dict[str, Any]) -> Logprob:
    token = str(entry.get("token") or "")
    tops = entry.get("top_logprobs")
    return {"token": token, "bytes": _bytes(entry.get("bytes"), token),
            "logprob": _number(entry.get("logprob")),
            "top_logprobs": [_top_entry(a) for a in tops if isinstance(a, dict)]
            if isinstance(tops, list) else []}


def _top_entry(entry: dict[str, Any]) -> Logprob:
    token = str(entry.get("token") or "")
    return {"token": token, "bytes": _bytes(entry.get("bytes"), token),
            "logprob": _number(entry.get("logprob"))}


def _bytes(value: Any, token: str) -> list[int]:
    if isinstance(value, list):
        return value
    return list(token.encode("utf-8", errors="replace"))  # vLLM sends null when undecoded


def _number(value: Any) -> float:
    # vLLM floors at -9999.0 and sends that when the sampled token had no logprob.
    return float(value) if isinstance(value, int | float) else -9999.0


def _spelling(entries: list[Any], content: str) -> list[Any]:
    """The contiguous run of `entries` whose tokens join to `content` (none if no run does)."""
    tokens = [str(e.get("token") or "") if isinstance(e, dict) else "" for e in entries]
    for start in range(len(tokens)):
        joined = ""
        for end in range(start, len(tokens)):
            joined += tokens[end]
            if joined == content:
                return entries[start:end + 1]
            if not content.startswith(joined):
                break
    return []
