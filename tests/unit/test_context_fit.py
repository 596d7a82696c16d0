"""services/responses/tokenize.py `fit`: measure, drop by estimate, measure again, within
MAX_ROUNDS; a
replica without /tokenize leaves the prompt alone; an unknown model stays a 404."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import ModelNotFound, NotFound
from proxy.services.fleet.gateway import Gateway
from proxy.services.responses import tokenize as context


class Counted:
    """A stand-in for the fleet: /tokenize answers with the simulator's kind of count (one
    token per word plus 4 per message), max_model_len 100."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls = 0
        self.fail = fail

    def max_model_len(self, model: str) -> int | None:
        return None

    async def open(self, model: str, path: str, body: bytes, **_: Any) -> Any:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        messages = orjson.loads(body)["messages"]
        count = sum(4 + len(str(m.get("content") or "").split()) for m in messages)
        return _Call(orjson.dumps({"count": count, "max_model_len": 100, "tokens": []}))


class _Response:
    def __init__(self, content: bytes) -> None:
        self.content = content

    async def aread(self) -> bytes:
        return self.content


class _Call:
    def __init__(self, content: bytes) -> None:
        self.response = _Response(content)
        self.replica = type("R", (), {"url": "http://replica"})()

    async def aclose(self) -> None:
        return None

    async def read_all(self) -> bytes:
        data: bytes = await self.response.aread()
        return data


def via(fleet: Counted) -> Gateway:
    """The gateway over the stand-in fleet (a token count is never admitted: no admission)."""
    return Gateway(fleet, None)  # type: ignore[arg-type]


def chat(n: int) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "system", "content": "s"},
                                       *({"role": "user", "content": "w " * 20} for _ in range(n)),
                                       {"role": "user", "content": "last"}]}


async def test_a_prompt_that_fits_is_measured_once_and_left_alone() -> None:
    fleet = Counted()
    request = chat(2)
    assert await context.fit(via(fleet), request, reserve=None) is request
    assert fleet.calls == 1


async def test_a_long_prompt_is_cut_to_fit_in_bounded_rounds() -> None:
    fleet = Counted()
    fitted = await context.fit(via(fleet), chat(10), reserve=10)
    messages = fitted["messages"]
    assert messages[0]["content"] == "s" and messages[-1]["content"] == "last"
    assert sum(4 + len(str(m["content"]).split()) for m in messages) <= 90
    assert fleet.calls <= context.MAX_ROUNDS


async def test_no_tokenize_endpoint_sends_the_prompt_as_it_is() -> None:
    fleet = Counted(fail=NotFound("Not Found"))
    request = chat(10)
    assert await context.fit(via(fleet), request, reserve=None) is request


async def test_an_unknown_model_stays_a_404() -> None:
    with pytest.raises(ModelNotFound):
        await context.fit(via(Counted(fail=ModelNotFound("m"))), chat(1),
                          reserve=None)
