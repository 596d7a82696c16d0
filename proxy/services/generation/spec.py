"""`JobSpec`: what a background job carries from the request that created it to the worker
that runs it, typed and versioned.

The create path writes it (services/responses/create.py `_submit`), the queue holds it as bytes
(store/jobqueue.py), a worker on any instance, perhaps of another release, reads it
(services/jobs/runner.py). So the wire form is a contract between releases:

- version 1 (this one): a JSON object with `"version": 1`, `"kind": "response"` (the queue's
  job kinds: services/jobs/kinds.py) and the fields below;
- version 0: the untyped dict written before the version existed (the same keys, no
  `version`). Still read, so jobs queued by the previous release run after an upgrade;
- a version above `VERSION` comes from a newer release during a rolling upgrade: refused with
  `UnreadableSpec`, and the worker leaves the job unacknowledged for a worker that reads it
  (the queue's reclaim hands it on), never guessing at fields it does not know.

An older release reading a version-1 spec ignores the `version` key (it reads keys one by one),
so a rollback runs the jobs this release queued.

What never rides here: the stored Response object (the worker reads it from the store) and
anything secret beyond what the turn needs (the MCP servers' headers do, the worker must send
them: they live as long as the job's queue entry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.errors import ProxyError
from proxy.services.generation.toolloop import LoopPlan

VERSION = 1
# The job kind a response's spec names (services/jobs/kinds.py); a spec without one is one too.
KIND = "response"


class UnreadableSpec(ProxyError):
    """A spec this release cannot read (newer, or not a job spec at all)."""


@dataclass(frozen=True)
class JobSpec:
    tenant: str
    model: str
    chat: dict[str, Any]  # the upstream chat request of the first turn
    affinity: str | None = None
    home: str | None = None  # the replica chosen at submit (recorded on the Response too)
    service_tier: str | None = None
    seal: bool = False  # include reasoning.encrypted_content
    conversation: str | None = None
    # The creating request's id: the job's upstream call and log lines carry it.
    request_id: str | None = None
    # The tool loop's plan when the request has tools the proxy runs (MCP and hosted ones).
    # Stored under the key "mcp", its name before hosted tools rode in it: releases on either
    # side of an upgrade read each other's specs.
    tool_plan: LoopPlan | None = None
    # The key's limits ticket, taken over by the worker (services/metering/limits.py
    # `Ticket.job_limit`).
    limit: dict[str, Any] | None = None
    # The creating request's span (W3C `traceparent`; tracing on): the job's span is its child.
    traceparent: str | None = None
    # Tools offered beside the response's own (a search's, an `additional_tools` item's:
    # core/tools/toolsearch.py `loaded_tools`): the worker's assembler names their calls.
    known_tools: list[dict[str, Any]] | None = None

    @property
    def priority(self) -> bool:
        return self.service_tier == "priority"

    def to_json(self) -> bytes:
        data: dict[str, Any] = {
            "version": VERSION, "kind": KIND, "tenant": self.tenant, "model": self.model,
            "chat": self.chat,
            "affinity": self.affinity, "home": self.home, "service_tier": self.service_tier,
            "seal": self.seal, "conversation": self.conversation,
            "request_id": self.request_id}
        if self.tool_plan is not None:
            data["mcp"] = self.tool_plan.to_spec()
        if self.limit:
            data["limit"] = self.limit
        if self.traceparent:
            data["traceparent"] = self.traceparent
        if self.known_tools:
            data["known_tools"] = self.known_tools
        return orjson.dumps(data)

    @classmethod
    def from_json(cls, raw: bytes) -> JobSpec:
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise UnreadableSpec("the job's spec is not JSON") from exc
        if not isinstance(data, dict):
            raise UnreadableSpec("the job's spec is not a JSON object")
        if data.get("kind", KIND) != KIND:
            raise UnreadableSpec(f"the job's spec is of kind {data['kind']!r}, not a response's")
        version = data.get("version", 0)  # 0: written before specs had a version
        if not isinstance(version, int) or version > VERSION:
            raise UnreadableSpec(f"the job's spec has version {version!r}; this release reads "
                                 f"versions up to {VERSION} (left for a newer worker)")
        try:
            return cls(
                tenant=str(data["tenant"]), model=str(data["model"]), chat=dict(data["chat"]),
                affinity=_text(data.get("affinity")), home=_text(data.get("home")),
                service_tier=_text(data.get("service_tier")), seal=bool(data.get("seal")),
                conversation=_text(data.get("conversation")),
                request_id=_text(data.get("request_id")),
                tool_plan=LoopPlan.from_spec(data["mcp"]) if data.get("mcp") else None,
                limit=dict(data["limit"]) if data.get("limit") else None,
                traceparent=_text(data.get("traceparent")),
                known_tools=list(data["known_tools"]) if data.get("known_tools") else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise UnreadableSpec(f"the job's spec lacks or mistypes a field: {exc}") from exc


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
