"""Outbound connections to URLs a client named: the name resolved once and the
connection made to the vetted address (upstream/egress.py), and media fetched by the proxy and sent
inline under `--fetch-allow` (services/fleet/media.py). A small HTTP server on loopback plays the
remote side; resolvers are injected so a test decides what a name answers, and when."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.ids import counter_ids
from proxy.core.policy.urlpolicy import parse_target
from proxy.core.request.items import parse_input
from proxy.services.fleet.media import MediaFetcher
from proxy.upstream.egress import EgressRefused, PinnedTransport, pin, pinned_client

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
PUBLIC = "93.184.216.34"


@dataclass
class Remote:
    """A loopback HTTP/1.1 server: path → (status, headers, body); records each request."""

    routes: dict[str, tuple[int, dict[str, str], bytes]]
    seen: list[dict[str, str]] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        path = head[0].split(" ")[1]
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)}
        self.seen.append({"path": path, **headers})
        status, extra, body = self.routes.get(path, (404, {}, b""))
        lines = [f"HTTP/1.1 {status} X", f"content-length: {len(body)}", "connection: close",
                 *(f"{k}: {v}" for k, v in extra.items())]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await writer.drain()
        writer.close()


@pytest.fixture
async def remote() -> AsyncIterator[Remote]:
    state = Remote({
        "/cat.png": (200, {"content-type": "image/png"}, PNG),
        "/page": (200, {"content-type": "text/html"}, b"<html>"),
        "/to-metadata": (302, {"location": "http://169.254.169.254/latest/meta-data/"}, b""),
        "/to-cat": (302, {"location": "/cat.png"}, b""),
        "/missing": (404, {}, b""),
    })
    server = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    async with server:
        yield state


def rebinding(*answers: list[str]) -> tuple[Any, list[str]]:
    """A resolver that gives each answer in turn (the last one from then on)."""
    calls: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        return answers[min(len(calls), len(answers)) - 1]
    return resolve, calls


# -- pinning ----------------------------------------------------------------------------------
async def test_a_name_is_resolved_once_and_the_request_goes_to_that_address() -> None:
    resolve, calls = rebinding([PUBLIC], ["127.0.0.1"])  # public first, then loopback
    pinned = await pin(parse_target("https://tools.example/mcp"), False, timeout=1,
                       allow="--x", resolve=resolve)
    sent: list[httpx2.Request] = []

    def capture(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        return httpx2.Response(200)

    transport = PinnedTransport(pinned, inner=httpx2.MockTransport(capture))
    async with httpx2.AsyncClient(transport=transport) as client:
        await client.get("https://tools.example/mcp")
        await client.post("https://tools.example/mcp", content=b"{}")
        with pytest.raises(httpx2.ConnectError):  # another origin: never
            await client.get("https://other.example/mcp")
    assert calls == ["tools.example"]  # one resolution, whatever the name answers next
    assert [r.url.host for r in sent] == [PUBLIC, PUBLIC]
    assert {r.headers["host"] for r in sent} == {"tools.example"}
    assert {r.extensions["sni_hostname"] for r in sent} == {"tools.example"}  # TLS: the name


@pytest.mark.parametrize("answer", [["127.0.0.1"], [PUBLIC, "10.0.0.7"], ["169.254.169.254"],
                                    ["::ffff:127.0.0.1"], [],
                                    # v6 answers embedding a private IPv4 (DNS64, 6to4, ...)
                                    ["64:ff9b::a9fe:a9fe"], ["2002:a00:1::1"],
                                    ["::127.0.0.1"], [PUBLIC, "64:ff9b::10.0.0.7"]])
async def test_a_name_with_any_address_the_operator_did_not_allow_is_refused(
        answer: list[str]) -> None:
    resolve, _ = rebinding(answer)
    with pytest.raises(EgressRefused):
        await pin(parse_target("https://tools.example/"), False, timeout=1, allow="--x",
                  resolve=resolve)


async def test_the_connection_itself_goes_to_the_vetted_address(remote: Remote) -> None:
    # `pinned.test` resolves nowhere but in our resolver: reaching the server proves the
    # socket went to the vetted address, and the server still sees the name as Host.
    resolve, _ = rebinding(["127.0.0.1"])
    target = parse_target(f"http://pinned.test:{remote.port}/cat.png")
    pinned = await pin(target, True, timeout=1, allow="--x", resolve=resolve)
    async with pinned_client(pinned, timeout=httpx2.Timeout(5)) as client:
        response = await client.get(target.url)
    assert response.content == PNG
    assert remote.seen[-1]["host"] == f"pinned.test:{remote.port}"


# -- media ------------------------------------------------------------------------------------
def image_input(url: str) -> list[Any]:
    return parse_input([{"role": "user", "content": [
        {"type": "input_text", "text": "what is it?"},
        {"type": "input_image", "image_url": url}]}], counter_ids(), max_items=8)


def fetcher(*allow: str, max_bytes: int = 1 << 20, resolve: Any = None) -> MediaFetcher:
    return MediaFetcher(allow, timeout=5, max_bytes=max_bytes, resolve=resolve)


async def refusal(media: MediaFetcher, url: str) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        await media.for_items(image_input(url), [], "previous_response_id")
    assert info.value.param == "input[0].content[1].image_url"
    return info.value


async def test_an_allowed_image_is_fetched_and_sent_inline(remote: Remote) -> None:
    url = f"http://127.0.0.1:{remote.port}/cat.png"
    media = await fetcher("http://127.0.0.1:").for_items(image_input(url), [], "x")
    assert media == {url: "data:image/png;base64," + base64.b64encode(PNG).decode()}
    redirected = f"http://127.0.0.1:{remote.port}/to-cat"  # a redirect on the same rules
    assert (await fetcher("http://127.0.0.1:").for_items(image_input(redirected), [], "x")
            )[redirected] == media[url]


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/",
                                 "https://169.254.169.254/", "https://[::1]/x.png",
                                 "https://10.0.0.1/x.png", "file:///etc/passwd",
                                 "https://img.example/a/../x.png", "ftp://img.example/x.png"])
async def test_by_default_private_and_non_https_urls_are_refused_naming_the_part(
        url: str) -> None:
    await refusal(fetcher("https://"), url)


async def test_a_name_resolving_to_a_private_address_is_refused(remote: Remote) -> None:
    resolve, calls = rebinding(["127.0.0.1"])
    error = await refusal(fetcher("http://", resolve=resolve),
                          f"http://img.test:{remote.port}/cat.png")
    assert "private address" in str(error) and calls == ["img.test"] and not remote.seen


async def test_a_redirect_is_vetted_like_the_first_url(remote: Remote) -> None:
    await refusal(fetcher("http://127.0.0.1:"), f"http://127.0.0.1:{remote.port}/to-metadata")


@pytest.mark.parametrize("path", ["/page", "/missing"])
async def test_what_is_not_an_image_is_refused(remote: Remote, path: str) -> None:
    await refusal(fetcher("http://127.0.0.1:"), f"http://127.0.0.1:{remote.port}{path}")


async def test_the_fetched_bytes_are_bounded(remote: Remote) -> None:
    error = await refusal(fetcher("http://127.0.0.1:", max_bytes=len(PNG)),
                          f"http://127.0.0.1:{remote.port}/cat.png")  # base64 is 4/3 of it
    assert "--max-body-bytes" in str(error)


async def test_history_images_are_fetched_too_and_name_the_chain() -> None:
    with pytest.raises(InvalidRequest) as info:
        await fetcher("https://").for_items([], image_input("http://169.254.169.254/"),
                                            "previous_response_id")
    assert info.value.param == "previous_response_id"


async def test_chat_messages_get_their_media_inline_and_refusals_name_the_part(
        remote: Remote) -> None:
    url = f"http://127.0.0.1:{remote.port}/cat.png"
    messages: list[Any] = [{"role": "user", "content": [
        {"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": url}},
        {"type": "image_url", "image_url": url}]}]
    assert await fetcher("http://127.0.0.1:").inline_chat(messages)
    assert [p["image_url"]["url"][:22] for p in messages[0]["content"][1:]] == \
        ["data:image/png;base64,"] * 2
    assert not await fetcher("http://127.0.0.1:").inline_chat(messages)  # data: URLs stay
    for kind in ("image_url", "video_url", "audio_url"):
        bad = [{"role": "user", "content": [
            {"type": kind, kind: {"url": "http://169.254.169.254/x"}}]}]
        with pytest.raises(InvalidRequest) as info:
            await fetcher("https://").inline_chat(bad)
        assert info.value.param == f"messages[0].content[0].{kind}"
