"""Web search (`--web-search URL`, a SearXNG-compatible JSON endpoint): the pure parts. No I/O.

    GET URL?q=<query>&format=json  →  {"results": [{"url", "title", "content"}, ...]}
        ─ parse_results ─▶ at most N `WebResult`s (http(s) URLs only, fields bounded)
        ─ searched ─▶ HostedResult: the `web_search_call` item's `action` (the query sent, the
                      sources), the numbered text the model reads, the citable sources

Numbering goes on across the searches of one response (`first`), so [n] names one result
whatever search found it. The query is the model's, bounded (`MAX_QUERY_CHARS`); it is never
logged (it is the user's data).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core.hosted import HostedResult, Source, arguments_of
from proxy.core.tools.citations import sentences

MAX_QUERY_CHARS = 1000
# What one result may bring (the model reads it, the store keeps its URL and title).
_MAX_URL, _MAX_TITLE, _MAX_CONTENT = 2048, 300, 1500


@dataclass(frozen=True, slots=True)
class WebResult:
    url: str
    title: str
    content: str


def query_of(arguments: str) -> str:
    """The query the model asked for (whitespace collapsed, bounded); "" when none."""
    query = arguments_of(arguments).get("query")
    if not isinstance(query, str):
        return ""
    return " ".join(query.split())[:MAX_QUERY_CHARS]


def parse_results(body: Any, limit: int) -> list[WebResult]:
    """The endpoint's results, at most `limit`. Raises ValueError for a body that is not
    SearXNG's shape (the search then fails)."""
    if not isinstance(body, dict) or not isinstance(body.get("results"), list):
        raise ValueError("the search endpoint's answer has no `results` list")
    out: list[WebResult] = []
    for entry in body["results"]:
        if len(out) == limit:
            break
        if not isinstance(entry, dict):
            continue
        url = entry.get("url")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")) \
                or len(url) > _MAX_URL:
            continue
        title = entry.get("title") if isinstance(entry.get("title"), str) else ""
        content = entry.get("content") if isinstance(entry.get("content"), str) else ""
        out.append(WebResult(url, " ".join(str(title).split())[:_MAX_TITLE] or url,
                             " ".join(str(content).split())[:_MAX_CONTENT]))
    return out


def searched(query: str, results: list[WebResult], first: int) -> HostedResult:
    """A search that answered: results numbered from `first`."""
    action = {"type": "search", "query": query,
              "sources": [{"type": "url", "url": r.url} for r in results]}
    if not results:
        return HostedResult({"action": action}, f'No web results for "{query}".')
    lines = [f'Web results for "{query}". Cite a result you use by its number, e.g. '
             f"[{first}]."]
    sources: list[Source] = []
    for number, result in enumerate(results, start=first):
        lines += ["", f"[{number}] {result.title}", f"URL: {result.url}", result.content]
        sources.append(Source(number, {"type": "url_citation", "url": result.url,
                                       "title": result.title},
                              (result.url, result.title, *sentences(result.content))))
    return HostedResult({"action": action}, "\n".join(lines).rstrip(), tuple(sources))


def search_failed(query: str, reason: str) -> HostedResult:
    """A search that could not be made: the item `failed`; the model is told, and answers
    without it."""
    return HostedResult({"action": {"type": "search", "query": query}},
                        f"The web search failed ({reason}); answer without it.", failed=True)
