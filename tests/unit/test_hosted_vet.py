"""Hosted tools checked before the model runs: `HostedTools.vet` names the
request's own tool (`tools[i].vector_store_ids`), also through the traced wrapper."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from proxy.core.errors import NotFound
from proxy.core.hosted import FILE_SEARCH, HostedKind
from proxy.services.metering.embedding import EmbeddingAccounts
from proxy.services.tools.filesearch import FileSearch
from proxy.services.tools.hosted import HostedTools, TracedRunner


@dataclass
class Stores:
    """A searcher that knows the stores in `held` (by key)."""

    held: dict[str, set[str]]
    asked: list[tuple[str, str]] = field(default_factory=list)
    accounts: EmbeddingAccounts = field(default_factory=EmbeddingAccounts)  # no limits

    async def known(self, tenant: str, vs_id: str) -> bool:
        self.asked.append((tenant, vs_id))
        return vs_id in self.held.get(tenant, set())


class NullTracing:
    def tool_span(self, *_: Any) -> Any:  # never entered by vet
        raise AssertionError("vet makes no span")


TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object"}},
         {"type": "file_search", "vector_store_ids": ["vs_mine", "vs_theirs"]}]


@pytest.mark.parametrize("traced", [False, True])
async def test_a_store_the_key_does_not_hold_is_refused_naming_the_tool(traced: bool) -> None:
    stores = Stores({"a": {"vs_mine"}, "b": {"vs_theirs"}})
    runner: Any = FileSearch(stores)  # type: ignore[arg-type]
    if traced:
        runner = TracedRunner(FILE_SEARCH, runner, NullTracing())  # type: ignore[arg-type]
    tools = HostedTools({FILE_SEARCH.name: runner})
    with pytest.raises(NotFound) as refused:
        await tools.vet("a", TOOLS)
    assert refused.value.param == "tools[1].vector_store_ids"
    assert "vs_theirs" in refused.value.message
    assert await tools.vet("b", [{"type": "file_search", "vector_store_ids": ["vs_theirs"]}]
                           ) == {"file_search": {}}
    assert ("b", "vs_theirs") in stores.asked


async def test_kinds_without_a_check_and_requests_without_tools_pass() -> None:
    @dataclass
    class Plain:
        kind: HostedKind = FILE_SEARCH

    tools = HostedTools({FILE_SEARCH.name: Plain()})  # type: ignore[dict-item]
    assert await tools.vet("a", TOOLS) == {}
    assert await HostedTools().vet("a", TOOLS) == {}
    assert await tools.vet("a", None) == {}
