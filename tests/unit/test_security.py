"""Security properties checked on the code itself: key checks in constant
time over every key, ids from the OS's CSPRNG, and the JSON nesting bound."""

from __future__ import annotations

import hmac
import re
from typing import Any

import pytest

from proxy.core import ids
from proxy.core.errors import InvalidRequest
from proxy.core.events.wsframe import parse_frame
from proxy.core.request.jsonbody import MAX_DEPTH, check_depth, parse_object
from proxy.web.middleware import auth


@pytest.mark.parametrize("token", ["sk-one", "sk-three", "sk-nope", ""])
def test_every_configured_key_is_compared_with_compare_digest(
        monkeypatch: pytest.MonkeyPatch, token: str) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    keys = [b"sk-one", b"sk-two", b"sk-three"]
    accepted = auth.key_accepted(keys, token)
    assert accepted == (token.encode() in keys)
    # No early exit on a match: the time taken says nothing about which key (or how many).
    assert [b for _, b in calls] == keys


def test_the_middleware_checks_keys_through_key_accepted(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    seen: list[str] = []

    def spy(keys: Any, token: str) -> bool:
        seen.append(token)
        return False

    monkeypatch.setattr(auth, "key_accepted", spy)
    middleware = auth.Auth(keys=["sk-a"])
    assert middleware._accepts("sk-guess") is False
    assert seen == ["sk-guess"]


def test_ids_come_from_the_kernels_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def urandom(n: int) -> bytes:
        asked.append(n)
        return b"\xab" * n

    monkeypatch.setattr(ids, "random_hex", ids.RandomHex(read=urandom).take)
    assert ids.new_id("resp") == "resp_" + "ab" * 24  # 192 bits: no id guessed from another
    assert asked == [ids.BUFFER_BYTES]


def test_ids_have_the_shape_and_do_not_repeat() -> None:
    made = {ids.new_id(prefix) for prefix in ("resp", "msg", "conv") for _ in range(2000)}
    assert len(made) == 6000
    assert all(re.fullmatch(r"(resp|msg|conv)_[0-9a-f]{48}", value) for value in made)


def _nest(depth: int) -> bytes:
    return b'{"input": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


def test_nesting_up_to_the_bound_is_accepted_and_past_it_refused_naming_the_field() -> None:
    assert parse_object(_nest(MAX_DEPTH))["input"] is not None
    with pytest.raises(InvalidRequest) as refused:
        parse_object(_nest(MAX_DEPTH + 1))
    assert refused.value.param == "input"
    assert refused.value.code == "nesting_too_deep"
    assert refused.value.status == 400


@pytest.mark.parametrize("depth", [1000, 1024, 100_000])
def test_very_deep_bodies_are_a_400_not_a_recursion_error(depth: int) -> None:
    with pytest.raises(InvalidRequest):
        parse_object(_nest(depth))
    value: Any = 1
    for _ in range(depth):
        value = [value]
    with pytest.raises(InvalidRequest):  # the walk is iterative: no RecursionError either
        check_depth({"metadata": value})


def test_websocket_frames_have_the_same_bound() -> None:
    frame = b'{"type": "response.create", "input": ' + b"[" * 80 + b"]" * 80 + b"}"
    with pytest.raises(InvalidRequest) as refused:
        parse_frame(frame)
    assert refused.value.param == "input"
