"""The web search client (`--web-search URL`): one GET to the operator's SearXNG-compatible
endpoint per search, I/O at the edge (the pure parts are core/websearch.py).

    run(arguments, first) ─▶ HostedResult  (never raises: a failure is a `failed` result)

Only the configured URL is ever fetched (a client names no URL here). Its name is resolved per
search and the connection goes to the address vetted then (upstream/egress.py, pinned: a second DNS
answer gets no say); private addresses are allowed, since the operator named this endpoint
(SearXNG usually runs beside the proxy), as `--upstream` is. Each search is bounded in time
(`timeout`, connect included, under one deadline) and in size (`max_bytes` of answer, read as
it comes; more is a failure, not a truncation that would not parse); redirects are not
followed. One log line per search: its outcome and time, never the query (the user's data).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import anyio
import orjson

from proxy.core.hosted import WEB_SEARCH, HostedCall, HostedKind, HostedResult
from proxy.core.policy.urlpolicy import parse_target
from proxy.core.websearch import parse_results, query_of, search_failed, searched

if TYPE_CHECKING:
    from proxy.upstream.egress import Resolve

log = logging.getLogger("proxy.services.tools.websearch")
ALLOW = "--web-search"


class _Failed(Exception):
    """A search that could not be made; the message says why (it reaches the model)."""


class WebSearch:
    """The hosted runner of `web_search` (services/tools/hosted.py `HostedRunner`)."""

    kind: HostedKind = WEB_SEARCH

    def __init__(self, url: str, *, timeout: float, max_results: int,
                 max_bytes: int = 1024 * 1024, resolve: Resolve | None = None) -> None:
        self._url = url
        self._target = parse_target(url)  # checked at start (settings/checks.py)
        self._timeout = timeout
        self._max_results = max_results
        self._max_bytes = max_bytes
        self._resolve = resolve  # None: the system's resolver (egress.system_resolve)

    async def run(self, arguments: str, first: int, call: HostedCall | None = None
                  ) -> HostedResult:
        del call  # a web search has no per-request options
        query = query_of(arguments)
        if not query:
            return search_failed(query, "the call named no query")
        started = time.monotonic()
        try:
            body = await self._get(query)
            results = parse_results(orjson.loads(body), self._max_results)
        except (_Failed, ValueError) as exc:  # (orjson's decode error is a ValueError)
            reason = str(exc) if isinstance(exc, _Failed) else "its answer is not SearXNG's JSON"
            log.info("web search failed in %.0f ms: %s", _ms(started), reason)
            return search_failed(query, f"the search endpoint failed: {reason}")
        log.info("web search: %d results in %.0f ms", len(results), _ms(started))
        return searched(query, results, first)

    def _search_url(self, query: str) -> str:
        joiner = "&" if "?" in self._url else "?"
        return self._url + joiner + urlencode({"q": query, "format": "json"})

    async def _get(self, query: str) -> bytes:
        # Imported on first use: httpx2 costs start-up time (proxy/upstream/egress.py says why).
        import httpx2

        from proxy.upstream.egress import EgressRefused, pin, pinned_client, system_resolve

        try:
            with anyio.fail_after(self._timeout):
                pinned = await pin(self._target, True, timeout=self._timeout, allow=ALLOW,
                                   resolve=self._resolve or system_resolve)
                async with (pinned_client(pinned, timeout=httpx2.Timeout(self._timeout)) as http,
                            http.stream("GET", self._search_url(query),
                                        headers={"accept": "application/json"}) as response):
                    if response.status_code != 200:
                        raise _Failed(f"HTTP {response.status_code}")
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > self._max_bytes:
                            raise _Failed(f"its answer is over {self._max_bytes} bytes")
                    return bytes(body)
        except TimeoutError:
            raise _Failed(f"no answer within {self._timeout:g}s") from None
        except EgressRefused as exc:
            raise _Failed(exc.message) from None
        except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
            raise _Failed(f"unreachable ({exc.__class__.__name__})") from None


def _ms(started: float) -> float:
    return (time.monotonic() - started) * 1000
