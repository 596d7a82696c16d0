"""Parsing SSE bodies in tests: frames, `data:` payloads, event lists."""

from __future__ import annotations

from typing import Any

import orjson


def frames(body: bytes | str) -> list[dict[str, str]]:
    """Each frame as {field: value}; comment lines (pings) are dropped."""
    text = body.decode() if isinstance(body, bytes) else body
    out: list[dict[str, str]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            fields[name] = fields[name] + "\n" + value if name in fields else value
        if fields:
            out.append(fields)
    return out


def data_payloads(body: bytes | str) -> list[Any]:
    """Every `data:` value parsed as JSON, `[DONE]` kept as the string."""
    result: list[Any] = []
    for frame in frames(body):
        if "data" in frame:
            data = frame["data"]
            result.append(data if data == "[DONE]" else orjson.loads(data))
    return result


def mask(chunk: Any, keys: tuple[str, ...] = ("id", "created")) -> Any:
    """Drop per-request values (ids, timestamps) so two runs compare equal."""
    if isinstance(chunk, dict):
        return {k: ("*" if k in keys else mask(v, keys)) for k, v in chunk.items()}
    if isinstance(chunk, list):
        return [mask(v, keys) for v in chunk]
    return chunk
