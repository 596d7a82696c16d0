"""The soak's traffic, one kind per function, in a registry: `KINDS` maps a name to its weight
and its coroutine. A new kind of traffic is one more `@kind(...)`-decorated
function here; the soak draws from whatever is registered.

Each kind runs one client interaction against the two instances (`Ctx.a`, `Ctx.b`: whichever
serves is drawn at random, so objects made on one are read on the other), and returns the
status codes it met; the soak counts them by kind. A 200 whose content is wrong (an MCP call
without its result) goes to `Ctx.errors`, which fails the soak as a transport error does.
Prompts are unique per call except the cache kind's, which repeats a few on purpose (exact
cache hits).
"""

from __future__ import annotations

import contextlib
import itertools
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx
import orjson

MODEL = "sim-model"
# Small answers at a steady pace: the soak measures the proxy's resources, not the simulator.
SHORT = "[[sim tokens=24 delay_ms=5]]"


@dataclass
class Ctx:
    a: httpx.AsyncClient
    b: httpx.AsyncClient
    rng: random.Random
    serial: itertools.count[int]
    notes: Counter[str]  # the messages of refusals, for the report
    errors: Counter[str] = field(default_factory=Counter)  # wrong answers: the soak fails
    seen: Counter[str] = field(default_factory=Counter)  # what was done, for the report
    mcp_url: str | None = None  # a real MCP server the instances may call (`--mcp-allow`)

    def note(self, response: httpx.Response) -> int:
        if response.status_code >= 300:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self.notes[str(response.json()["error"]["message"])[:100]] += 1
        return response.status_code

    def either(self) -> httpx.AsyncClient:
        return self.a if self.rng.random() < 0.5 else self.b

    def other(self, client: httpx.AsyncClient) -> httpx.AsyncClient:
        return self.b if client is self.a else self.a

    def prompt(self, what: str) -> str:
        return f"soak {what} {next(self.serial)} {SHORT}"


Run = Callable[[Ctx], Awaitable[list[int]]]


@dataclass(frozen=True)
class Kind:
    name: str
    weight: int
    run: Run


KINDS: dict[str, Kind] = {}


def kind(name: str, weight: int) -> Callable[[Run], Run]:
    def register(run: Run) -> Run:
        KINDS[name] = Kind(name, weight, run)
        return run

    return register


def create(client: httpx.AsyncClient, text: str, **body: object) -> Awaitable[httpx.Response]:
    return client.post("/v1/responses", json={"model": MODEL, "input": text, **body})


async def read_stream(client: httpx.AsyncClient, method: str, url: str,
                      body: dict[str, object] | None = None,
                      stop_after: int | None = None) -> tuple[int, list[dict[str, object]]]:
    """A stream's status and events; `stop_after` events and the client leaves."""
    events: list[dict[str, object]] = []
    async with client.stream(method, url, json=body) as response:
        if response.status_code != 200:
            await response.aread()
            return response.status_code, events
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(orjson.loads(line[6:]))
                if stop_after is not None and len(events) >= stop_after:
                    break
    return 200, events


@kind("stream", 4)
async def stream(ctx: Ctx) -> list[int]:
    status, _ = await read_stream(ctx.either(), "POST", "/v1/responses",
                                  {"model": MODEL, "input": ctx.prompt("stream"),
                                   "stream": True})
    return [status]


@kind("plain", 3)
async def plain(ctx: Ctx) -> list[int]:
    return [ctx.note(await create(ctx.either(), ctx.prompt("plain")))]


@kind("background+replay", 2)
async def background_replay(ctx: Ctx) -> list[int]:
    on = ctx.either()
    made = await create(on, ctx.prompt("background"), background=True)
    if made.status_code != 200:
        return [made.status_code]
    rid = made.json()["id"]
    status, _ = await read_stream(ctx.other(on), "GET",
                                  f"/v1/responses/{rid}?stream=true&starting_after=1")
    return [200, status]


@kind("cancel", 1)
async def cancel(ctx: Ctx) -> list[int]:
    on = ctx.either()
    made = await create(on, f"soak cancel {next(ctx.serial)} [[sim tokens=400 delay_ms=10]]",
                        background=True)
    if made.status_code != 200:
        return [made.status_code]
    stopped = await ctx.other(on).post(f"/v1/responses/{made.json()['id']}/cancel")
    return [200, ctx.note(stopped)]


@kind("client-leaves", 1)
async def client_leaves(ctx: Ctx) -> list[int]:
    status, _ = await read_stream(ctx.either(), "POST", "/v1/responses",
                                  {"model": MODEL, "stream": True,
                                   "input": f"soak leaves {next(ctx.serial)} "
                                            "[[sim tokens=400 delay_ms=10]]"}, stop_after=6)
    return [status]


@kind("conversation", 2)
async def conversation(ctx: Ctx) -> list[int]:
    made = await ctx.either().post("/v1/conversations", json={})
    if made.status_code != 200:
        return [made.status_code]
    cid = made.json()["id"]
    codes = [200]
    for turn in range(2):
        codes.append(ctx.note(await create(ctx.either(), ctx.prompt(f"conversation {turn}"),
                                           conversation=cid)))
    return codes


@kind("cache-hit", 2)
async def cache_hit(ctx: Ctx) -> list[int]:
    # One of a few prompts asked again and again: after the first, exact hits.
    text = f"soak cached question {ctx.rng.randrange(8)} {SHORT}"
    return [ctx.note(await create(ctx.either(), text, store=False))]


@kind("previous-response-chain", 2)
async def chain(ctx: Ctx) -> list[int]:
    codes: list[int] = []
    previous: str | None = None
    for _ in range(3):
        extra = {"previous_response_id": previous} if previous else {}
        got = await create(ctx.either(), ctx.prompt("chain"), **extra)
        codes.append(ctx.note(got))
        if got.status_code != 200:
            break
        previous = got.json()["id"]
    return codes


def mcp_call_checked(ctx: Ctx, output: list[dict[str, object]], total: int) -> None:
    """The call ran on the MCP server and its result is the sum asked for."""
    calls = [item for item in output if item.get("type") == "mcp_call"]
    if len(calls) == 1 and calls[0].get("output") == str(total) and calls[0].get("error") is None:
        ctx.seen["mcp calls"] += 1
    else:
        ctx.errors[f"mcp: a call without its result: {[i.get('type') for i in output]}"] += 1


@kind("mcp", 2)
async def mcp(ctx: Ctx) -> list[int]:
    """The proxy lists the server's tools, runs the `add` the model asks for, and continues
    the turn with its result; one in two streamed."""
    assert ctx.mcp_url is not None, "the soak starts an MCP server for this kind"
    a, b = ctx.rng.randrange(1000), ctx.rng.randrange(1000)
    body: dict[str, object] = {
        "model": MODEL,
        "input": f'soak mcp {next(ctx.serial)} [[sim call=add call_args={{"a":{a},"b":{b}}}]]',
        "tools": [{"type": "mcp", "server_label": "soak", "server_url": ctx.mcp_url,
                   "require_approval": "never"}]}
    if ctx.rng.random() < 0.5:
        status, events = await read_stream(ctx.either(), "POST", "/v1/responses",
                                           {**body, "stream": True})
        if status == 200:
            last = events[-1] if events else {}
            final = last.get("response") if last.get("type") == "response.completed" else None
            output = final.get("output") if isinstance(final, dict) else None
            mcp_call_checked(ctx, output if isinstance(output, list) else [], a + b)
        return [status]
    got = await ctx.either().post("/v1/responses", json=body)
    if got.status_code == 200:
        mcp_call_checked(ctx, got.json().get("output", []), a + b)
    return [ctx.note(got)]
