"""Vector stores (`client.vector_stores`): the request fields and the objects, as the SDK's
types have them (openai/types/vector_store*.py, vector_stores/*). Pure.

A store's record keeps what its requests said (name, metadata, expiry); what its files did
(`file_counts`, `usage_bytes`, `status`) is counted from its files' own records when it is read
(`store_object`), so no write ever updates two counts that could disagree.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from proxy.core.request.fields import (
    at,
    bad,
    check_metadata,
    expect_list,
    expect_object,
    expect_str,
    one_of,
    opt_int,
    opt_number,
    opt_str,
)
from proxy.core.vectors.chunking import DEFAULT_MAX_TOKENS, DEFAULT_OVERLAP, MAX_TOKENS, MIN_TOKENS
from proxy.core.vectors.filters import parse_filters

MAX_NAME = 256
MAX_DAYS = 365
DAY = 86400
FILE_STATUSES = ("in_progress", "completed", "cancelled", "failed")
# The SDK's `last_error.code` values.
SERVER_ERROR, UNSUPPORTED_FILE, INVALID_FILE = "server_error", "unsupported_file", "invalid_file"


def store_id() -> str:
    return "vs_" + secrets.token_hex(16)


def batch_id() -> str:
    return "vsfb_" + secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class Chunking:
    max_tokens: int = DEFAULT_MAX_TOKENS
    overlap: int = DEFAULT_OVERLAP

    def strategy(self) -> dict[str, Any]:
        return {"type": "static", "static": {"max_chunk_size_tokens": self.max_tokens,
                                             "chunk_overlap_tokens": self.overlap}}


def parse_chunking(value: Any, path: str = "chunking_strategy") -> Chunking:
    if value is None:
        return Chunking()
    node = expect_object(value, path)
    kind = one_of(node.get("type"), ("auto", "static"), at(path, "type"))
    if kind == "auto":
        return Chunking()
    static = expect_object(node.get("static"), at(path, "static"))
    where = at(path, "static")
    size = opt_int(static, "max_chunk_size_tokens", where, low=MIN_TOKENS, high=MAX_TOKENS)
    size = DEFAULT_MAX_TOKENS if size is None else size
    overlap = opt_int(static, "chunk_overlap_tokens", where, low=0)
    overlap = min(DEFAULT_OVERLAP, size // 2) if overlap is None else overlap
    if overlap > size // 2:
        raise bad(at(where, "chunk_overlap_tokens"),
                  f"Invalid '{at(where, 'chunk_overlap_tokens')}': {overlap} is more than half "
                  f"of max_chunk_size_tokens ({size}).")
    return Chunking(size, overlap)


def parse_expires_after(value: Any, path: str = "expires_after") -> int | None:
    """The lifetime in days (None: none asked for)."""
    if value is None:
        return None
    node = expect_object(value, path)
    one_of(node.get("anchor"), ("last_active_at",), at(path, "anchor"))
    days = opt_int(node, "days", path, low=1, high=MAX_DAYS)
    if days is None:
        raise bad(at(path, "days"), f"Missing required parameter: '{at(path, 'days')}'.")
    return days


def parse_attributes(value: Any, path: str = "attributes") -> dict[str, Any] | None:
    """OpenAI's rule: at most 16 keys of up to 64 characters; values strings (up to 512),
    numbers or booleans."""
    if value is None:
        return None
    data = expect_object(value, path)
    if len(data) > 16:
        raise bad(path, f"Invalid '{path}': too many keys ({len(data)}); at most 16 are allowed.")
    for key, item in data.items():
        where = at(path, key)
        if len(key) > 64:
            raise bad(path, f"Invalid '{path}': key {key[:20]!r}… is longer than 64 characters.")
        if isinstance(item, str):
            if len(item) > 512:
                raise bad(where, f"Invalid '{where}': value is longer than 512 characters.")
        elif not isinstance(item, int | float | bool):
            raise bad(where, f"Invalid '{where}': expected a string, number or boolean.")
    return dict(data)


def parse_file_ids(value: Any, path: str, limit: int) -> list[str]:
    ids = expect_list(value, path)
    if len(ids) > limit:
        raise bad(path, f"Invalid '{path}': too many files ({len(ids)}); at most {limit}.")
    out: dict[str, None] = {}  # each id once, in order (linear, unlike a list's `in`)
    for i, item in enumerate(ids):
        out[expect_str(item, at(path, i))] = None
    return list(out)


def parse_name(body: dict[str, Any]) -> str | None:
    return opt_str(body, "name", max_len=MAX_NAME)


def parse_metadata(body: dict[str, Any]) -> dict[str, str] | None:
    return None if body.get("metadata") is None else check_metadata(body["metadata"])


def lifetime(days: int | None, ttl: int) -> int:
    """Seconds a store lives from its last activity: its `expires_after`, never more than
    `--response-ttl` (the rule every stored object follows)."""
    return ttl if days is None else min(days * DAY, ttl)


def store_record(vs_id: str, now: int, name: str | None, days: int | None,
                 metadata: dict[str, str] | None, expires_at: int) -> dict[str, Any]:
    return {"id": vs_id, "object": "vector_store", "created_at": now, "name": name or "",
            "last_active_at": now, "metadata": metadata or {},
            "expires_after": None if days is None else {"anchor": "last_active_at",
                                                         "days": days},
            "expires_at": expires_at}


def counts(files: list[dict[str, Any]]) -> dict[str, int]:
    out = dict.fromkeys(FILE_STATUSES, 0)
    for file in files:
        out[file["status"]] = out.get(file["status"], 0) + 1
    return {**out, "total": len(files)}


def store_object(record: dict[str, Any], files: list[dict[str, Any]]) -> dict[str, Any]:
    tally = counts(files)
    return {**record, "file_counts": tally,
            "status": "in_progress" if tally["in_progress"] else "completed",
            "usage_bytes": sum(int(f.get("usage_bytes") or 0) for f in files)}


def file_record(file_id: str, vs_id: str, now: int, attributes: dict[str, Any] | None,
                chunking: Chunking) -> dict[str, Any]:
    return {"id": file_id, "object": "vector_store.file", "created_at": now, "usage_bytes": 0,
            "vector_store_id": vs_id, "status": "in_progress", "last_error": None,
            "attributes": attributes or {}, "chunking_strategy": chunking.strategy()}


def batch_object(record: dict[str, Any], files: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch counts its own files (those still in the store)."""
    mine = set(record["file_ids"])
    tally = counts([f for f in files if f["id"] in mine])
    status = "in_progress" if tally["in_progress"] else (
        "cancelled" if record.get("cancelled") else "completed")
    return {"id": record["id"], "object": "vector_store.files_batch",
            "created_at": record["created_at"], "vector_store_id": record["vector_store_id"],
            "status": status, "file_counts": tally}


def chunking_of(file: dict[str, Any]) -> Chunking:
    static = (file.get("chunking_strategy") or {}).get("static") or {}
    return Chunking(int(static.get("max_chunk_size_tokens") or DEFAULT_MAX_TOKENS),
                    int(static.get("chunk_overlap_tokens") or 0))


# -- file batches and search --------------------------------------------------------------------
Entry = tuple[str, dict[str, Any] | None, Chunking]  # a file to add: id, attributes, chunking


def parse_batch(body: dict[str, Any], max_files: int) -> list[Entry]:
    """A file batch's files: `file_ids` (sharing the batch's attributes and chunking) or
    `files` (each with its own, the batch's by default), not both."""
    attributes = parse_attributes(body.get("attributes"))
    chunking = parse_chunking(body.get("chunking_strategy"))
    if body.get("files") is None:
        ids = parse_file_ids(body.get("file_ids"), "file_ids", max_files)
        if not ids:
            raise bad("file_ids", "Invalid 'file_ids': expected at least one file id.")
        return [(file_id, attributes, chunking) for file_id in ids]
    if body.get("file_ids") is not None:
        raise bad("files", "Give either 'file_ids' or 'files', not both.")
    listed = expect_list(body["files"], "files")
    if not 1 <= len(listed) <= max_files:
        raise bad("files", f"Invalid 'files': expected 1 to {max_files} files.")
    entries: dict[str, Entry] = {}  # a file listed twice is added (and ingested) once: the first
    for i, raw in enumerate(listed):
        where = at("files", i)
        entry = expect_object(raw, where)
        own = entry.get("chunking_strategy")
        file_id = expect_str(entry.get("file_id"), at(where, "file_id"))
        parsed = (file_id,
                  parse_attributes(entry.get("attributes"), at(where, "attributes")) or attributes,
                  chunking if own is None else parse_chunking(own, at(where, "chunking_strategy")))
        entries.setdefault(file_id, parsed)
    return list(entries.values())


MAX_RESULTS = 50
MAX_QUERY_CHARS = 4000


@dataclass(frozen=True, slots=True)
class SearchRequest:
    queries: list[str]  # as sent (the answer echoes them)
    query: str  # what is embedded: the queries joined, bounded
    limit: int
    threshold: float
    filters: dict[str, Any] | None


def parse_search(body: dict[str, Any]) -> SearchRequest:
    raw = body.get("query")
    queries = ([expect_str(raw, "query")] if not isinstance(raw, list) else
               [expect_str(q, at("query", i)) for i, q in enumerate(raw)])
    if not any(q.strip() for q in queries):
        raise bad("query", "Invalid 'query': expected a non-empty string.")
    return SearchRequest(queries, " ".join(queries)[:MAX_QUERY_CHARS],
                         opt_int(body, "max_num_results", low=1, high=MAX_RESULTS) or 10,
                         parse_threshold(body.get("ranking_options"), "ranking_options"),
                         parse_filters(body.get("filters"), "filters"))


def parse_threshold(value: Any, path: str) -> float:
    if value is None:
        return 0.0
    node = expect_object(value, path)
    if node.get("ranker") is not None:
        one_of(node["ranker"], ("none", "auto", "default-2024-11-15"), at(path, "ranker"))
    return opt_number(node, "score_threshold", path, low=0.0, high=1.0) or 0.0
