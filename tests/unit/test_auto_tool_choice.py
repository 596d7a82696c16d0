"""`tool_choice: "auto"` on a replica started without `--enable-auto-tool-choice`: vLLM's 400
becomes one naming the missing flag, and the fleet remembers the replica (its next such
requests go to the others)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import AutoToolChoiceUnavailable, InvalidRequest
from proxy.upstream.client import error_from_upstream
from tests.unit.test_fleet import StaticProbe, fleet

VLLM_400 = orjson.dumps({"object": "error", "type": "BadRequestError", "code": 400, "message":
                         '"auto" tool choice requires --enable-auto-tool-choice and '
                         "--tool-call-parser to be set"})
AUTO = orjson.dumps({"model": "m", "tools": [], "tool_choice": "auto"})


def test_vllms_400_names_the_missing_replica_flag() -> None:
    error = error_from_upstream(400, VLLM_400, "http://10.0.0.5:8000")
    assert isinstance(error, InvalidRequest) and error.status == 400
    assert "--enable-auto-tool-choice" in error.message and "replica" in error.message
    assert error.param == "tool_choice"


class Refusing(StaticProbe):
    """Replicas in `lacking` refuse tool_choice auto; the others answer."""

    def __init__(self, *lacking: str) -> None:
        super().__init__()
        self.lacking = lacking
        self.posts: list[str] = []

    async def post(self, base: str, path: str, body: bytes, **kwargs: Any) -> Any:
        self.posts.append(base)
        if base in self.lacking and b'"tool_choice":"auto"' in body:
            raise error_from_upstream(400, VLLM_400, base)
        return object()


async def test_a_replica_without_the_flag_is_remembered_and_skipped() -> None:
    f = fleet("http://a", "http://b")
    f.upstream = probe = Refusing("http://a")  # type: ignore[assignment]
    f.replicas[1].in_flight = 5  # `a` is chosen first
    call = await f.open("m", "/v1/chat/completions", AUTO, stream=True)
    assert call.replica.url == "http://b" and probe.posts == ["http://a", "http://b"]
    assert f.status()[0]["auto_tool_choice"] is False
    probe.posts.clear()
    await f.open("m", "/v1/chat/completions", AUTO, stream=True)
    assert probe.posts == ["http://b"]  # remembered
    await f.open("m", "/v1/chat/completions", b'{"model":"m"}', stream=True)
    assert probe.posts[-1] == "http://a"  # without auto it is as good as any


async def test_no_replica_with_the_flag_is_the_clear_400_until_one_has_it() -> None:
    f = fleet("http://a")
    f.upstream = probe = Refusing("http://a")  # type: ignore[assignment]
    for _ in range(2):
        with pytest.raises(AutoToolChoiceUnavailable) as info:
            await f.open("m", "/v1/chat/completions", AUTO, stream=True)
        assert "--enable-auto-tool-choice" in info.value.message
    # Restarted with the flag: asked again, since no replica is known to have it.
    probe.lacking = ()
    call = await f.open("m", "/v1/chat/completions", AUTO, stream=True)
    assert call.replica.url == "http://a" and f.status()[0]["auto_tool_choice"] is True
