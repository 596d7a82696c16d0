"""How the script coalescer packs its calls (store/connection/coalesce.py `_packed`): as redis-py
would send them, whatever bytes-like type an argument is, and a value Redis cannot take is
redis-py's `DataError`."""

from __future__ import annotations

import asyncio
from typing import Any

import hiredis
import pytest
from redis import exceptions as rex

from proxy.store.connection.coalesce import _Call, _packed


class _Script:
    sha = "0123456789abcdef0123456789abcdef01234567"
    script = "return 1"


def call(*args: Any) -> _Call:
    loop = asyncio.new_event_loop()
    try:
        return _Call(_Script(), ["k"], list(args), loop.create_future())  # type: ignore[arg-type]
    finally:
        loop.close()


def test_each_bytes_like_argument_packs_as_its_bytes() -> None:
    expected = hiredis.pack_command(("EVALSHA", _Script.sha, 1, "k", b"ab", b"cd", "e",  # type: ignore[arg-type]
                                     7))
    assert _packed([call(bytearray(b"ab"), memoryview(b"cd"), "e", 7)]) == expected
    assert _packed([call(b"ab", b"cd", "e", 7)] * 2) == expected * 2


def test_a_value_redis_cannot_take_is_a_data_error() -> None:
    with pytest.raises(rex.DataError):
        _packed([call({"not": "a string"})])
