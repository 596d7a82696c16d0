"""Usage: the upstream's chat usage in the Responses shape, and several turns summed."""

from __future__ import annotations

from typing import Any


def map_usage(usage: dict[str, Any] | None, *, reasoned: int = 0) -> dict[str, Any] | None:
    """Chat usage → Responses usage, every key the SDKs require present (docs/protocol.md §1.1).

    What vLLM reports is passed on as it came: `cached_tokens` exists only on a replica started
    with `--enable-prompt-tokens-details` (0 otherwise: the SDKs require the key), and
    `reasoning_tokens` only from 2026 builds with a reasoning parser. Without it, `reasoned`
    (the reasoning fragments the turn streamed; vLLM sends one per decoded token unless a step
    makes several, e.g. speculative decoding) stands in, capped at the completion tokens."""
    if not usage:
        return None
    prompt = usage.get("prompt_tokens_details") or {}
    completion = usage.get("completion_tokens_details") or {}
    input_tokens = int(usage.get("prompt_tokens") or 0)
    output_tokens = int(usage.get("completion_tokens") or 0)
    reasoning = completion.get("reasoning_tokens")
    if reasoning is None:
        reasoning = min(reasoned, output_tokens)
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": int(prompt.get("cached_tokens") or 0),
            "cache_write_tokens": 0,
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": int(reasoning or 0)},
        "total_tokens": int(usage.get("total_tokens") or input_tokens + output_tokens),
    }


def add_usage(before: dict[str, Any], now: dict[str, Any] | None) -> dict[str, Any]:
    """Usage of several upstream turns of one response, summed."""
    if now is None:
        return before
    out = {key: before[key] + now[key] for key in
           ("input_tokens", "output_tokens", "total_tokens")}
    out["input_tokens_details"] = {
        key: before["input_tokens_details"][key] + now["input_tokens_details"][key]
        for key in ("cached_tokens", "cache_write_tokens")}
    out["output_tokens_details"] = {"reasoning_tokens": (
        before["output_tokens_details"]["reasoning_tokens"] +
        now["output_tokens_details"]["reasoning_tokens"])}
    return out
