"""A large body's nesting is measured on its bytes (core/request/jsonbody.py `_shallow`) before the
walk, which costs a microsecond of Python per object: the two must agree on every body, and a
body of many small objects must not be walked (cost bounds: 16 MiB of parts was half
a second of walk on the event loop)."""

from __future__ import annotations

import random

import orjson
import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.request import jsonbody
from proxy.core.request.jsonbody import MAX_DEPTH, _shallow, check_depth, parse_object


def _walk_says_shallow(body: bytes) -> bool:
    try:
        check_depth(orjson.loads(body))
    except InvalidRequest:
        return False
    return True


def _walk_says_shallow_at(body: bytes, limit: int) -> bool:
    try:
        check_depth(orjson.loads(body), limit)
    except InvalidRequest:
        return False
    return True


def _nested(depth: int, leaf: object = 1) -> bytes:
    """An object whose deepest container is at `depth` (the body itself is level 1)."""
    value: object = leaf
    for level in range(depth - 1):
        value = [value] if level % 2 else {"k": value}
    return orjson.dumps({"input": value})


TRICKY_STRINGS = ["plain", "[", "]]]", "{[", 'a"b', "a\\", "\\\"[", "\\\\", "\\\\\"{",
                  "\u201c[\u201d", "", "\\n[\\t", "a,b", ":", '",[', "[:]", '"":""']


@pytest.mark.parametrize("depth", [1, 2, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 100])
@pytest.mark.parametrize("text", TRICKY_STRINGS)
def test_the_byte_measure_agrees_with_the_walk(depth: int, text: str) -> None:
    body = _nested(depth, leaf=text)
    assert _shallow(body) == _walk_says_shallow(body), body[:200]


def test_random_bodies_agree() -> None:
    rng = random.Random(38)
    pieces = ["[", "]", "{", "}", '"', "\\", "a", ":", ","]
    for _ in range(300):
        value: object = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 12)))
        for _ in range(rng.randrange(0, 80)):
            value = rng.choice([[value], {"k": value, "s": "x\\\"y"}, [1, value, "]"],
                                {"a,": value, ":": ",", "": [""]}])
        body = orjson.dumps({"input": value, "t": "q\\\\"})
        assert _shallow(body) == _walk_says_shallow(body), body[:300]


def test_strings_holding_brackets_between_structure_are_measured_right() -> None:
    # the quote closing one string and the one opening the next are adjacent here
    for value in (["a[", "]b"], ["[x]"] * 40, [["[", ["]"]]] * 3, {"a{": [{"}": "["}]}):
        body = orjson.dumps({"input": value})
        assert _shallow(body, limit=3) == _walk_says_shallow_at(body, 3), body


def test_a_body_mostly_of_short_strings_holding_brackets_is_left_to_the_walk() -> None:
    body = orjson.dumps({"input": ["["] * 3000})
    assert not _shallow(body)
    assert _walk_says_shallow(body)


def test_a_large_body_of_small_objects_is_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[int] = []
    monkeypatch.setattr(jsonbody, "check_depth", lambda data: walked.append(1))
    part = {"type": "input_text", "text": "a [[code]] {x}"}
    body = orjson.dumps({"input": [{"role": "user", "content": [part] * 20_000}]})
    assert len(body) > jsonbody._SCAN_BYTES
    assert parse_object(body)["input"][0]["content"][0] == part
    assert walked == []


def test_a_large_body_too_deep_is_still_refused_naming_the_field() -> None:
    body = _nested(MAX_DEPTH + 1)[:-1] + b',"pad":"' + b"x" * jsonbody._SCAN_BYTES + b'"}'
    with pytest.raises(InvalidRequest) as refused:
        parse_object(body)
    assert refused.value.param == "input"
    assert refused.value.code == "nesting_too_deep"


def test_a_small_body_is_walked_only_when_its_brackets_could_nest_too_deep(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No more brackets opened than `MAX_DEPTH` (strings' counted too): no walk (it was ~50
    calls for a short agent turn's body); more, the walk as before."""
    walked: list[int] = []
    monkeypatch.setattr(jsonbody, "check_depth", lambda data: walked.append(1))
    parse_object(b'{"input": "hi"}')
    parse_object(orjson.dumps({"input": [{"role": "user", "content": "[" * 70}]}))
    assert walked == [1]


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1])
def test_a_small_body_nesting_to_the_limit_passes_past_it_is_refused(depth: int) -> None:
    body = _nested(depth)
    if depth > MAX_DEPTH:
        with pytest.raises(InvalidRequest) as refused:
            parse_object(body)
        assert refused.value.code == "nesting_too_deep"
    else:
        assert parse_object(body) == orjson.loads(body)
