"""services/generation/spec.py: the job spec's wire form is a contract between releases. Today's
spec round-trips; the untyped dict the previous release queued is still read; a newer
version is refused by name, never half-read."""

from __future__ import annotations

import orjson
import pytest

from proxy.core import mcp
from proxy.services.generation.spec import VERSION, JobSpec, UnreadableSpec
from proxy.services.generation.toolloop import LoopPlan

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}

# Exactly what services/responses/create.py `_submit` wrote before specs had a version.
PREVIOUS_RELEASE = {"tenant": "t1", "model": "m", "chat": CHAT, "affinity": "conv_1",
                    "home": "http://replica:8000", "service_tier": "priority", "seal": True,
                    "conversation": "conv_1", "request_id": "req_abc",
                    "limit": {"lease": "lease_1", "minute": True, "total": False}}


def plan() -> LoopPlan:
    server = mcp.McpServer("calc", "http://127.0.0.1/mcp", approval="never")
    return LoopPlan((server,), {}, [], max_calls=3, offered=("calc",), mode="auto")


def test_a_spec_round_trips_with_its_version() -> None:
    spec = JobSpec("t1", "m", CHAT, affinity="a", home="http://r", service_tier="priority",
                   seal=True, conversation="conv_1", request_id="req_1", tool_plan=plan(),
                   limit={"lease": None, "minute": True, "total": True})
    raw = spec.to_json()
    assert orjson.loads(raw)["version"] == VERSION
    assert JobSpec.from_json(raw) == spec
    assert spec.priority


def test_the_previous_releases_untyped_dict_is_still_read() -> None:
    spec = JobSpec.from_json(orjson.dumps({**PREVIOUS_RELEASE, "mcp": plan().to_spec()}))
    assert spec == JobSpec("t1", "m", CHAT, affinity="conv_1", home="http://replica:8000",
                           service_tier="priority", seal=True, conversation="conv_1",
                           request_id="req_abc", tool_plan=plan(),
                           limit={"lease": "lease_1", "minute": True, "total": False})


def test_a_minimal_previous_spec_reads_with_defaults() -> None:
    spec = JobSpec.from_json(orjson.dumps({"tenant": "t", "model": "m", "chat": CHAT,
                                           "affinity": None, "home": None,
                                           "service_tier": "auto", "seal": False,
                                           "conversation": None, "request_id": None}))
    assert spec.tool_plan is None and spec.limit is None and not spec.priority


def test_the_tool_plan_keeps_its_stored_key_across_the_rename() -> None:
    # `JobSpec.tool_plan` was `mcp`; a release on either side of the upgrade reads "mcp".
    data = orjson.loads(JobSpec("t", "m", CHAT, tool_plan=plan()).to_json())
    assert data["mcp"] == plan().to_spec() and "tool_plan" not in data


def test_an_older_release_reads_todays_spec_key_by_key() -> None:
    data = orjson.loads(JobSpec("t", "m", CHAT).to_json())
    assert {k: data[k] for k in ("tenant", "model", "chat")} == {
        "tenant": "t", "model": "m", "chat": CHAT}  # the keys it reads, unchanged


@pytest.mark.parametrize("raw", [
    orjson.dumps({**PREVIOUS_RELEASE, "version": VERSION + 1}),
    orjson.dumps({**PREVIOUS_RELEASE, "version": "2"}),
])
def test_a_newer_version_is_refused_by_name(raw: bytes) -> None:
    with pytest.raises(UnreadableSpec, match="version"):
        JobSpec.from_json(raw)


@pytest.mark.parametrize("raw", [b"not json", b"[]", orjson.dumps({"tenant": "t"})])
def test_what_is_no_spec_is_refused(raw: bytes) -> None:
    with pytest.raises(UnreadableSpec):
        JobSpec.from_json(raw)
