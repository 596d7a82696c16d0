"""`/v1/embeddings`: deterministic vectors that behave like real ones, in vLLM's response shape.

A text's vector is a signed feature hash: its lower-cased character trigrams (weight 1) and
words (weight 2) each land in one of `dim` buckets with a sign, both from blake2b (stable across
processes, unlike `hash()`), and the sum is L2-normalised. Texts sharing most trigrams and words
get a cosine near 1; unrelated texts land near 0. An empty text still gets a unit vector.

Response: vLLM's `EmbeddingResponse` as a full `model_dump()`: id `embd-<hex>`, object "list",
created, model, data [{index, object "embedding", embedding}], usage with completion_tokens 0 and
a null prompt_tokens_details. `encoding_format: "base64"` gives little-endian float32 bytes.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from typing import Any

from proxy.simulator.errors import invalid, model_not_found

DEFAULT_DIM = 256  # when the request gives no `dimensions`
MAX_DIM = 8192
MAX_INPUTS = 2048


def embed(text: str, dim: int) -> list[float]:
    vector = [0.0] * dim
    for feature, weight in _features(text):
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        number = int.from_bytes(digest, "little")
        vector[number % dim] += weight if number >> 63 else -weight
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        vector[0], norm = 1.0, 1.0
    return [v / norm for v in vector]


def _features(text: str) -> list[tuple[str, float]]:
    lowered = " ".join(text.lower().split())
    padded = f"  {lowered}  "
    grams = [("c:" + padded[i : i + 3], 1.0) for i in range(len(padded) - 2)]
    words = [("w:" + word, 2.0) for word in lowered.split()]
    return grams + words if lowered else []


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def response(body: Any, models: tuple[str, ...], *, request_id: str, created: int,
             default_dim: int = DEFAULT_DIM) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise invalid("Input should be a valid dictionary or object to extract fields from")
    model = body.get("model")
    if model is None:
        model = models[0]
    elif not isinstance(model, str):
        raise invalid("`model` should be a valid string", param="model")
    elif model not in models:
        raise model_not_found(model)
    texts = _inputs(body.get("input"))
    dim = _dimensions(body.get("dimensions"), default_dim)
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise invalid("`encoding_format` should be float or base64", param="encoding_format")
    data = [{"index": i, "object": "embedding", "embedding": _encode(embed(t, dim), fmt)}
            for i, t in enumerate(texts)]
    used = sum(max(1, len(t.split())) for t in texts)
    return {"id": request_id, "object": "list", "created": created, "model": model,
            "data": data, "usage": {"prompt_tokens": used, "total_tokens": used,
                                    "completion_tokens": 0, "prompt_tokens_details": None}}


def _inputs(value: Any) -> list[str]:
    """str | list[str] | list[int] | list[list[int]] (token ids are read as words)."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value or len(value) > MAX_INPUTS:
        raise invalid(f"`input` should be a string or a list of 1 to {MAX_INPUTS} strings",
                      param="input")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [" ".join(f"t{v}" for v in value)]
    out = []
    for item in value:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, list) and all(isinstance(v, int) for v in item):
            out.append(" ".join(f"t{v}" for v in item))
        else:
            raise invalid("each `input` item should be a string or a list of token ids",
                          param="input")
    return out


def _dimensions(value: Any, default: int) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_DIM:
        raise invalid(f"`dimensions` should be an integer in [1, {MAX_DIM}]", param="dimensions")
    return value


def _encode(vector: list[float], fmt: str) -> list[float] | str:
    if fmt == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
