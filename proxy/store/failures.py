"""How the store's adapters meet a failing Redis: `store_errors` maps a failure of the backing
service to `StoreUnavailable` (503) where it happens, `read_retrying` is the read policy. Shared
by every adapter on the store's client (responses, conversations, leases, the job queue, the
cache, the limiter), so they fail alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
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
    OSError,  # includes asyncio's TimeoutError; redis-py wraps most, not every path
)


@contextmanager
def store_errors() -> Iterator[None]:
    """Map a failure of the backing service to `StoreUnavailable` (503). The message names only
    the kind of failure: addresses and credentials stay in the chained exception."""
    try:
        yield
    except rex.OutOfMemoryError as exc:
        # Not down but full: say so, an operator reading the client's error knows where to look.
        raise StoreUnavailable("The store is full (Redis maxmemory reached); writes are refused "
                               "until memory is freed.") from exc
    except _UNAVAILABLE as exc:
        raise StoreUnavailable(f"The store is unavailable ({type(exc).__name__}).") from exc
    except RuntimeError as exc:
        # uvloop's words for a write on a transport already closed: redis-py's cluster client
        # can recycle a connection while a command is being sent on it, when it re-reads the
        # slot map (a failover, a resharding). A dropped connection, not a bug.
        if not str(exc).startswith(_CLOSED_TRANSPORT):
            raise
        raise StoreUnavailable("The store is unavailable (connection closed).") from exc


_CLOSED_TRANSPORT = "unable to perform operation on"


async def read_retrying(op: Callable[[], Awaitable[T]]) -> T:
    """The read policy: once more on a dropped connection (a pooled socket that a Redis restart
    closed), never on a timeout (the server is stuck: the caller should get its 503 now)."""
    with store_errors():
        try:
            return await op()
        except rex.ConnectionError:
            return await op()
