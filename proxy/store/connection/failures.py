"""How the store's adapters meet a failing Redis: `store_errors` maps a failure of the backing
service to `StoreUnavailable` (503) where it happens, `read_retrying` is the read policy. Shared
by every adapter on the store's client (responses, conversations, leases, the job queue, the
cache, the limiter), so they fail alike.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TypeVar

from redis import exceptions as rex

from proxy.core.errors import StoreUnavailable

T = TypeVar("T")

# Failures that mean the store cannot serve right now (503), as opposed to a bug (500).
# ConnectionError covers refused/reset connections, BusyLoadingError (a restarting server still
# loading its data), MaxConnectionsError and authentication failures; the ResponseError
# subclasses are a replica that lost its primary, a full server, a cluster mid-failover.
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    rex.ConnectionError,
    rex.TimeoutError,
    rex.ReadOnlyError,
    rex.OutOfMemoryError,
    rex.ClusterDownError,
    rex.TryAgainError,
    # A Redis Cluster mid-failover or mid-resharding: redirected past redis-py's bound of 16
    # (ClusterError "TTL exhausted"), a slot whose primary is gone and not yet replaced.
    rex.ClusterError,
    rex.SlotNotCoveredError,
    OSError,  # includes asyncio's TimeoutError; redis-py wraps most, not every path
)

# A store that answers but refuses us: redis-py has no class for these, they arrive as a plain
# ResponseError whose first word is the server's error code. An operator must fix the store
# (or our credentials / ACL), so they are 503 naming the cause, not a 500 with a traceback:
# DENIED is protected mode (no password set and a non-loopback client), NOPERM an ACL user
# without the command or key, MISCONF a server that stops writes after a failed RDB save,
# NOREPLICAS min-replicas-to-write unmet, BUSY a script running past its time limit.
# Any other ResponseError (WRONGTYPE, a syntax error) is our bug and stays a 500.
_REFUSALS = ("DENIED", "NOPERM", "MISCONF", "NOREPLICAS", "BUSY")

# Credentials or ACL that the server refused: asking again on a fresh connection cannot help.
_NOT_RETRIED = (rex.AuthenticationError, rex.AuthorizationError)


class _StoreErrors:
    """`store_errors`' context manager: a class, not a `@contextmanager` generator, because it
    wraps every store call (a response's create and its final write among them): the
    generator's object, its two steps and its wrapper were ~1.8 µs a use against ~0.5, with
    no state of its own (one instance serves every use)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        # Returns None: an error that is not the store's failing propagates as it is.
        if exc is not None:
            raise_mapped(exc)


_STORE_ERRORS = _StoreErrors()


def store_errors() -> contextlib.AbstractContextManager[None]:
    """Map a failure of the backing service to `StoreUnavailable` (503). The message names only
    the kind of failure: addresses and credentials stay in the chained exception."""
    return _STORE_ERRORS


def raise_mapped(exc: BaseException) -> None:
    """`StoreUnavailable` from `exc` when it is a failure of the store; else returns (the
    caller re-raises `exc`): `store_errors` written out as `try`/`except` where a call per
    use counts (a response's create and its final write: its three calls, six per stored
    answer)."""
    if isinstance(exc, rex.OutOfMemoryError):
        # Not down but full: say so, an operator reading the client's error knows where to look.
        raise StoreUnavailable("The store is full (Redis maxmemory reached); writes are refused "
                               "until memory is freed.") from exc
    if isinstance(exc, rex.AuthenticationError):
        # NOAUTH (a password is required, none given) and WRONGPASS alike.
        raise StoreUnavailable("The store refused the proxy's credentials "
                               "(AuthenticationError).") from exc
    if isinstance(exc, _UNAVAILABLE):
        raise StoreUnavailable(f"The store is unavailable ({type(exc).__name__}).") from exc
    if isinstance(exc, rex.ResponseError):
        code = refusal_code(exc)
        if code is not None:
            raise StoreUnavailable(f"The store refused the command ({code}).") from exc
    elif isinstance(exc, (RuntimeError, AttributeError)) and _in_redis_connection(exc):
        # redis-py's cluster client recycles the connections of every node when it re-reads
        # the slot map (a failover, a resharding), and may close one while a command is being
        # sent on it: uvloop then says "unable to perform operation on <TCPTransport
        # closed=True>", or the connection's writer is already None. Raised inside redis-py's
        # connection code, that is a dropped connection, not a bug of ours.
        raise StoreUnavailable("The store is unavailable (connection closed).") from exc


def refusal_code(exc: rex.ResponseError) -> str | None:
    """The server's error code when `exc` is a refusal of the store (see `_REFUSALS`), else None."""
    # redis-py keeps the code apart ("status_code") for the codes it has a class for
    # (NoPermissionError) and leaves it as the message's first word for the others (DENIED).
    if isinstance(exc, rex.NoPermissionError):
        return "NOPERM"  # redis-py before 8 strips the code and keeps no status_code
    code = getattr(exc, "status_code", None)
    if not isinstance(code, str) or not code:
        code = str(exc).split(" ", 1)[0]
    return code if code in _REFUSALS else None


def _in_redis_connection(exc: BaseException) -> bool:
    tb = exc.__traceback__
    for _ in range(100):  # a traceback is finite; bounded anyway
        if tb is None:
            return False
        if tb.tb_frame.f_code.co_filename.endswith(_CONNECTION_MODULE):
            return True
        tb = tb.tb_next
    return False


_CONNECTION_MODULE = os.path.join("redis", "asyncio", "connection.py")


async def read_retrying(op: Callable[[], Awaitable[T]]) -> T:
    """The read policy: once more on a dropped connection (a pooled socket that a Redis restart
    closed), never on a timeout (the server is stuck: the caller should get its 503 now) nor on
    refused credentials (they will be refused again)."""
    with store_errors():
        try:
            return await op()
        except _NOT_RETRIED:
            raise
        except rex.ConnectionError:
            return await op()
