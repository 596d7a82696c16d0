"""Media URLs of a request, fetched by the proxy and sent to the fleet inline (no replica fetches
a client's URL).

vLLM fetches the URL of an `image_url` (`audio_url`, `video_url`, and every other spelling its
parser reads: core/translate/chatparts.py) part itself, from the GPU nodes: a client's
`http://169.254.169.254/...` would be read from inside the fleet's network (SSRF), and a name
vetted here could resolve elsewhere there (rebinding) or redirect there. So the proxy fetches
each URL, under `--fetch-allow`'s rules (core/policy/urlpolicy.py), the name resolved once and the
connection made to the vetted address (proxy/upstream/egress.py), and hands vLLM a data: URL: the
fleet never fetches anything a client named.

Chosen over passing vetted URLs through (which costs nothing here but leaves rebinding and
redirects to the fleet's own client): the proxy holds each fetched file while the request is
built (bounded below), the upstream body grows by the base64 of it, and the fetch is the one vLLM
would have made, from here instead.

Bounds: one fetch `timeout` seconds in all (connect included), at most `MAX_REDIRECTS`
redirects each vetted anew, only the part's own content type (`image/*` for an image); the
base64 of one request's fetches at most `max_bytes` (the request's `--max-body-bytes`), counted
as the bytes arrive; at most `PARALLEL` fetches at once; a URL repeated in a request is fetched
once. It runs once per request, before the upstream call; never per token. A URL refused or a
fetch that failed is a 400 naming the part (`input[i].content[j].image_url`,
`messages[i].content[j].image_url`). Responses echo and store the client's URL, not the data.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

import anyio

from proxy.core.errors import InvalidRequest
from proxy.core.policy.urlpolicy import UrlRefused, check, parse_prefix
from proxy.core.request.items import image_urls
from proxy.core.translate.chatparts import media_urls
from proxy.core.types import Item
from proxy.services.process import offload
from proxy.settings import FetchSettings, LimitSettings

if TYPE_CHECKING:
    from proxy.upstream.egress import Resolve

MAX_REDIRECTS = 3
PARALLEL = 4
ALLOW = "--fetch-allow"
# The family of an input_file's URL: any content type (the text extractor tells what it is).
ANY = "*"


class _FetchFailed(Exception):
    """Why one URL could not be fetched (the 400's message names the URL and this)."""


@dataclass
class _Budget:
    left: int

    def spend(self, encoded: int) -> None:
        self.left -= encoded
        if self.left < 0:
            raise _FetchFailed("the request's media are larger than this server accepts "
                               "(--max-body-bytes)")


class MediaFetcher:
    def __init__(self, allow: tuple[str, ...], *, timeout: float, max_bytes: int,
                 resolve: Resolve | None = None) -> None:
        self._prefixes = tuple(parse_prefix(p, host_required=False) for p in allow)
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._resolve = resolve  # None: the system's resolver (egress.system_resolve)

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @classmethod
    def from_settings(cls, fetch: FetchSettings, limits: LimitSettings) -> MediaFetcher:
        return cls(fetch.allow, timeout=fetch.timeout, max_bytes=limits.max_body_bytes)

    async def for_items(self, new: Iterable[Item], history: Iterable[Item],
                        history_param: str, *, size: int = 0) -> dict[str, str]:
        """URL → data: URL for the images of a Responses request: its new input (a failure
        names the part) and its history (named `history_param`: the chain or conversation).
        `size`: the body's bytes; a large body's parts are walked off the loop."""
        wanted = await offload.run(size, _images_wanted, new, history, history_param)
        return await self._fetch_all(wanted)

    async def fetch_files(self, wanted: dict[str, str], *, limit: int | None = None
                          ) -> dict[str, tuple[str, bytes]]:
        """URL → (its content type, its bytes) for input_file URLs (`wanted`: URL → the part's
        path), under the same rules and the same request budget as images, or `limit` when
        less (what is left of the request's expansion budget)."""
        data = await self._fetch_all({url: (ANY, where) for url, where in wanted.items()},
                                     limit)
        out = {}
        for url, value in data.items():
            head, _, payload = value.partition(",")
            out[url] = (head[5:].split(";")[0], base64.b64decode(payload))
        return out

    async def inline_chat(self, messages: Any, *, size: int = 0) -> bool:
        """Replace the media URLs of chat `messages` (a pass-through body) with their data, in
        place: every spelling vLLM would fetch, in every role (core/translate/chatparts.py). Whether
        anything was replaced. A part that cannot be classified is a 400 naming it. `size`:
        the body's bytes; a large body's parts are walked off the loop."""
        found = await offload.run(size, media_urls, messages)
        wanted = {ref.url: (ref.family, ref.where) for ref in found}
        if not wanted:
            return False
        data = await self._fetch_all(wanted)
        for ref in found:
            ref.holder[ref.slot] = data[ref.url]
        return True

    async def _fetch_all(self, wanted: dict[str, tuple[str, str]],
                         limit: int | None = None) -> dict[str, str]:
        if not wanted:
            return {}
        budget = _Budget(self._max_bytes if limit is None else min(limit, self._max_bytes))
        gate = asyncio.Semaphore(PARALLEL)
        out: dict[str, str] = {}

        async def one(url: str, family: str, where: str) -> None:
            async with gate:
                try:
                    out[url] = await self._fetch(url, family, budget)
                except (_FetchFailed, UrlRefused) as exc:
                    raise InvalidRequest(f"Error while downloading {url}: {exc}.",
                                         param=where) from None

        try:
            async with asyncio.TaskGroup() as group:
                for url, (family, where) in wanted.items():
                    group.create_task(one(url, family, where))
        except* InvalidRequest as failed:
            raise failed.exceptions[0] from None
        return out

    async def _fetch(self, url: str, family: str, budget: _Budget) -> str:
        """One URL as a data: URL. Raises _FetchFailed or UrlRefused."""
        from proxy.upstream.egress import EgressRefused

        try:
            with anyio.fail_after(self._timeout):
                for _ in range(MAX_REDIRECTS + 1):
                    got = await self._get(url, family, budget)
                    if isinstance(got, bytes):
                        break
                    url = got  # a redirect: the next hop is vetted like the first
                else:
                    raise _FetchFailed(f"more than {MAX_REDIRECTS} redirects")
        except TimeoutError:
            raise _FetchFailed(f"no answer within {self._timeout:g}s") from None
        except EgressRefused as exc:
            raise _FetchFailed(f"the URL's {exc.message}") from None
        return got.decode()

    async def _get(self, url: str, family: str, budget: _Budget) -> bytes | str:
        """The data: URL's bytes, or the URL a redirect points to."""
        import httpx2

        from proxy.upstream.egress import pin, pinned_client, system_resolve

        target, prefix = check(url, self._prefixes, ALLOW)
        pinned = await pin(target, prefix.private_ok, timeout=self._timeout, allow=ALLOW,
                           resolve=self._resolve or system_resolve)
        try:
            async with (pinned_client(pinned, timeout=httpx2.Timeout(self._timeout)) as http,
                        http.stream("GET", target.url) as response):
                location = response.headers.get("location")
                if response.is_redirect and location:
                    return urljoin(target.url, location)
                if response.status_code != 200:
                    raise _FetchFailed(f"the server answered HTTP {response.status_code}")
                kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if family != ANY and not kind.startswith(family + "/"):
                    raise _FetchFailed(f"the content type is {kind or 'missing'}, not "
                                       f"{family}/*")
                head = f"data:{kind};base64,".encode()
                budget.spend(len(head))
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    budget.spend(_encoded(len(body) + len(chunk)) - _encoded(len(body)))
                    body += chunk
                return head + base64.b64encode(body)
        except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
            raise _FetchFailed(f"the server is unreachable ({exc.__class__.__name__})"
                               ) from None


def _images_wanted(new: Iterable[Item], history: Iterable[Item],
                   history_param: str) -> dict[str, tuple[str, str]]:
    wanted: dict[str, tuple[str, str]] = {}
    for url, _ in image_urls(history, None):
        wanted[url] = ("image", history_param)
    for url, where in image_urls(new):
        wanted[url] = ("image", where or "input")
    return wanted


def _encoded(size: int) -> int:
    return (size + 2) // 3 * 4
