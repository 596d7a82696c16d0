"""file_search (core/hosted.py FILE_SEARCH): a search's hits as the tool's result. Pure.

    hits (core/vectors/search.py) ─▶ HostedResult: the `file_search_call` item's `queries` (and
        `results`, only when the request includes `file_search_call.results`), the numbered
        passages the model reads, and a `file_citation` source per passage

Numbering goes on across the searches of one response (`first`), as web search's does. What the
model reads of a passage is bounded (`MAX_PASSAGE_CHARS`).
"""

from __future__ import annotations

from typing import Any

from proxy.core.hosted import HostedResult, Source, arguments_of
from proxy.core.tools.citations import sentences
from proxy.core.vectors.search import Hit

MAX_QUERY_CHARS = 1000
MAX_PASSAGE_CHARS = 4000


def query_of(arguments: str) -> str:
    query = arguments_of(arguments).get("query")
    if not isinstance(query, str):
        return ""
    return " ".join(query.split())[:MAX_QUERY_CHARS]


def searched(query: str, hits: list[Hit], first: int, *, include: bool) -> HostedResult:
    results = [{"file_id": h.file.file_id, "filename": h.file.filename, "score": h.score,
                "text": h.text, "attributes": h.file.attributes} for h in hits]
    fields: dict[str, Any] = {"queries": [query], "results": results if include else None}
    if not hits:
        return HostedResult(fields, f'No passages of the files match "{query}".')
    lines = [f'File search results for "{query}". Cite a passage you use by its number, '
             f"e.g. [{first}]."]
    sources: list[Source] = []
    for number, hit in enumerate(hits, start=first):
        text = hit.text[:MAX_PASSAGE_CHARS]
        lines += ["", f"[{number}] {hit.file.filename or hit.file.file_id}",
                  f"File: {hit.file.file_id}", text]
        sources.append(Source(number, {"type": "file_citation", "file_id": hit.file.file_id,
                                       "filename": hit.file.filename},
                              sentences(text, 32), placement="index"))
    return HostedResult(fields, "\n".join(lines).rstrip(), tuple(sources))


def search_failed(query: str, reason: str, *, include: bool) -> HostedResult:
    return HostedResult({"queries": [query] if query else [],
                         "results": [] if include else None},
                        f"The file search failed ({reason}); answer without it.", failed=True)
