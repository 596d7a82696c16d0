"""docs/ARCHITECTURE.md "One request, end to end" cannot drift from the code.

One streamed, stored `POST /v1/responses` runs in process (the app over the embedded store and
the session's simulator) under `sys.setprofile`, which notes the module of every Python function
called for the request (in its context: not the loops running beside it). Each module that ran
is either on the walk (the document's numbered list, in reading order) or in `PLUMBING` below,
with why a reader following the request need not open it; every module listed ran; the walk
is at most `MAX_WALK` modules. A module the request starts to use fails here until the
document or `PLUMBING` names it.
"""

from __future__ import annotations

import re
import secrets
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from proxy.app import create_app
from proxy.core.context.requestctx import CURRENT
from proxy.settings import Settings
from tests.support.conformance import check_invariants, validate_with_sdk
from tests.support.sse import data_payloads

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
HEADING = "## One request, end to end"
MAX_WALK = 30

# Why a reader following the request need not open a module that runs for it -> those modules.
# Keep it short: a module that shapes the request's path belongs on the walk.
PLUMBING: dict[str, tuple[str, ...]] = {
    "the checks the one middleware (on the walk) calls, each in its room: the key's lookup, "
    "the access line, the body limit, the drain; the app and its route table (each fixed "
    "path's routes found once)": (
        "proxy.app", "proxy.web.middleware.auth", "proxy.web.middleware.access",
        "proxy.web.middleware.bodylimits", "proxy.web.middleware.draining",
        "proxy.web.routetable"),
    "what a handler takes from the request, where it finds the services, the disconnect "
    "watch around the set-up, the one loop timer the streams' pings wait on": (
        "proxy.web.incoming", "proxy.web.state", "proxy.web.disconnect", "proxy.web.ticks"),
    "telemetry: counters, histograms and the request id (tracing off, no span is opened, not "
    "even a null one); they decide nothing": (
        "proxy.telemetry.metrics", "proxy.telemetry.series", "proxy.core.context.requestctx"),
    "small values read along the way: ids, the tenant digest, the JSON content-type check, "
    "an id's shard tag, the key's storage budget": (
        "proxy.core.ids", "proxy.core.policy.tenancy", "proxy.core.policy.origin",
        "proxy.core.shardtags", "proxy.core.policy.storagebudget"),
    "checkers and readers the request parser calls, one per kind of field": (
        "proxy.core.request.fields", "proxy.core.request.jsonbody",
        "proxy.core.request.callids",
        "proxy.core.request.tools", "proxy.core.request.references",
        "proxy.core.tools.toolnames"),
    "details of the translation: the system prompt's merge, the fleet's errors renamed (the "
    "reasoning effort's fit runs only for a request that has one)": (
        "proxy.core.translate.system_prompt", "proxy.core.translate.fleet_errors"),
    "parts of the assembler a plain text answer only touches: the item base, usage, "
    "logprobs and summaries (not asked)": (
        "proxy.core.events.assembler.item", "proxy.core.events.assembler.usage",
        "proxy.core.events.assembler.logprobs", "proxy.core.events.summaries"),
    "the SSE wire format, both ways (chatstream.py decodes with it, eventstream.py frames), "
    "and events to their JSON (run.py encodes with it)": (
        "proxy.core.events.sse", "proxy.core.events.encoding"),
    "the store's machinery behind `RedisStore`'s methods: the protocol, key names, script "
    "arguments and replies (and the log's references and entries), pipelining (on its held "
    "connection), failures, the budget headroom (a stored create runs nothing of its "
    "conversation half: its TTL check compares in place)": (
        "proxy.store.base", "proxy.store.keys", "proxy.store.lua.references",
        "proxy.store.lua.packing",
        "proxy.store.lua.decoding", "proxy.store.connection.coalesce",
        "proxy.store.connection.held",
        "proxy.store.connection.failures", "proxy.store.budget.headroom"),
    "the HTTP/1.1 wire under upstream/client.py": (
        "proxy.upstream.http1", "proxy.upstream.pool"),
    "the process's machinery: the drain's count of foreground turns, task sets, the key "
    "ring auth reads, the limiter metering admits through": (
        "proxy.services.process.drain", "proxy.services.process.loops",
        "proxy.services.admin.keyring", "proxy.services.metering.limits"),
    "features this request does not use, asked once whether they apply: the cache (off), "
    "tool search (no deferred tools), compaction, the live followers (nobody follows); hosted "
    "tools, media fetching, a prompt template, the off-loop steps, the tolerance headers and "
    "the `Cache-Control` parse are not even asked (no tools, no image or file, no prompt, a "
    "small body, nothing ignored, no such header)": (
        "proxy.services.cache.responses", "proxy.core.tools.toolsearch",
        "proxy.core.compaction", "proxy.services.eventlog.follow"),
}
SKIPPED = {module for modules in PLUMBING.values() for module in modules}

STEP = re.compile(r"^\d+\. `([\w/]+\.py)`")


def walk_in_doc() -> list[str]:
    """The walk's modules in the document's order, as module names."""
    text = DOC.read_text(encoding="utf-8")
    assert HEADING in text, f"{DOC.name} has no section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    paths = [match.group(1) for line in section.splitlines() if (match := STEP.match(line))]
    return ["proxy." + path.removesuffix(".py").replace("/", ".") for path in paths]


class Modules:
    """The `proxy` modules whose Python code runs for the request while it is installed: in
    its own context (`CURRENT` holding the request's id, set by the access log and inherited by
    the tasks the request starts), so the loops running beside it (fleet discovery, the key
    ring's refresh, the embedded worker's poll) are not counted whether or not they happen to
    wake meanwhile, nor a loop some earlier request of the process left holding its own
    context (the worker's take loop once counted so in a full parallel run)."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.ran: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            context = CURRENT.get(None)
            if context is not None and context.request_id == self.request_id:
                name = frame.f_globals.get("__name__", "")
                if name.startswith("proxy."):
                    self.ran.add(name)


async def run_one_streamed_stored_create(settings: Settings) -> tuple[set[str], bytes]:
    app = create_app(settings)
    request_id = f"walk-{secrets.token_hex(8)}"
    modules = Modules(request_id)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            sys.setprofile(modules)
            try:
                answer = await http.post(
                    "/v1/responses", headers={"x-request-id": request_id},
                    json={"model": "sim-model", "input": "Say hello.", "stream": True,
                          "store": True})
            finally:
                sys.setprofile(None)
    assert answer.status_code == 200, answer.text
    return modules.ran, answer.content


async def test_the_walk_names_every_module_one_streamed_stored_create_runs(
        settings: Settings) -> None:
    ran, body = await run_one_streamed_stored_create(settings)
    events = [event for event in data_payloads(body) if event != "[DONE]"]
    validate_with_sdk(events)
    check_invariants(events)
    assert events[-1]["type"] == "response.completed"

    walk = walk_in_doc()
    assert len(walk) == len(set(walk)), "a module listed twice on the walk"
    assert len(walk) <= MAX_WALK, f"the walk is {len(walk)} modules (at most {MAX_WALK})"
    unexplained = sorted(ran - set(walk) - SKIPPED)
    assert unexplained == [], "modules the request ran that neither the walk nor PLUMBING name"
    assert sorted(set(walk) - ran) == [], "modules on the walk that the request never ran"
    assert sorted(SKIPPED - ran) == [], "modules in PLUMBING that the request never ran"


def test_the_walk_and_the_plumbing_name_modules_that_exist() -> None:
    walk = walk_in_doc()
    assert walk[0].startswith("proxy.web.") and walk[-1] == "proxy.web.eventstream"
    for module in [*walk, *SKIPPED]:
        path = ROOT / (module.replace(".", "/") + ".py")
        assert path.exists() or (path.with_suffix("") / "__init__.py").exists(), module
    assert not set(walk) & SKIPPED, "a module both on the walk and in PLUMBING"
