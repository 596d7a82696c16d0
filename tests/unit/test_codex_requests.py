"""The bodies real Codex CLI releases send (`codex exec`, a custom provider with
`wire_api = "responses"`), captured from `make compat`'s pinned and newest sets: each parses in
strict mode (no field unknown to the proxy), keeps every function and namespace tool, and
translates to one chat request for the fleet. A Codex release that adds a field the proxy does
not know fails here before a user meets it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.core.ids import counter_ids
from proxy.core.request.create import parse_request
from proxy.core.request.tolerance import Tolerance
from proxy.core.translate.chat import to_chat_request

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
STRICT_PARAMS = Tolerance(strict_params=True)
CAPTURED = sorted(FIXTURES.glob("codex_*_request.json"))


def test_the_pinned_and_the_newest_codex_are_both_captured() -> None:
    versions = {path.name.split("_")[1] for path in CAPTURED}
    assert {"0.169", "0.171"} <= versions


@pytest.mark.parametrize("path", CAPTURED, ids=lambda path: path.stem)
def test_a_codex_body_parses_strictly_and_translates(path: Path) -> None:
    body: dict[str, Any] = json.loads(path.read_text())
    request = parse_request(body, counter_ids(), tolerance=STRICT_PARAMS)
    assert request.ignored_params == ()
    assert request.dropped_tools == ("web_search",)  # no --web-search in this proxy
    chat = to_chat_request(request, request.input)
    names = {tool["function"]["name"] for tool in chat["tools"]}
    assert {"exec_command", "write_stdin", "update_goal"} <= names
    assert chat["messages"][0]["role"] == "system"  # instructions and developer text as one
    assert chat["messages"][-1]["role"] in ("user", "tool")
