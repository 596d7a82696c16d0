"""What redis-py raises for a store that refuses us maps to StoreUnavailable
(503), and a ResponseError that is our bug (WRONGTYPE, a syntax error) does not."""

from __future__ import annotations

import pytest
from redis import exceptions as rex
from redis._parsers.base import BaseParser

from proxy.core.errors import StoreUnavailable
from proxy.store.connection.failures import store_errors

# The server's own replies, parsed by redis-py's parser as a connection would.
REFUSED = [
    "NOAUTH Authentication required.",
    "WRONGPASS invalid username-password pair or user is disabled.",
    "DENIED Redis is running in protected mode because protected mode is enabled and no "
    "password is set for the default user.",
    "NOPERM this user has no permissions to run the 'set' command",
    "READONLY You can't write against a read only replica.",
    "OOM command not allowed when used memory > 'maxmemory'.",
    "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist "
    "to disk.",
    "NOREPLICAS Not enough good replicas to write.",
    "BUSY Redis is busy running a script.",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
    "LOADING Redis is loading the dataset in memory",
]


@pytest.mark.parametrize("reply", REFUSED, ids=[r.split()[0] for r in REFUSED])
def test_a_refusal_is_store_unavailable(reply: str) -> None:
    error = BaseParser.parse_error(reply)
    with pytest.raises(StoreUnavailable) as caught, store_errors():
        raise error
    assert caught.value.status == 503 and caught.value.code == "store_unavailable"
    assert caught.value.__cause__ is error  # the log names the cause from here


@pytest.mark.parametrize("reply", [
    "WRONGTYPE Operation against a key holding the wrong kind of value",
    "ERR syntax error",
    "NOSCRIPT No matching script. Please use EVAL.",
])
def test_our_own_bug_is_not_hidden_as_503(reply: str) -> None:
    error = BaseParser.parse_error(reply)
    with pytest.raises(rex.ResponseError) as caught, store_errors():
        raise error
    assert caught.value is error
