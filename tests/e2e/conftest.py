from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.clients import SDK
from tests.support.servers import ServerProcess, start_proxy


@pytest.fixture(scope="module")
def proxy(simulator: ServerProcess) -> Iterator[ServerProcess]:
    """A real proxy process (uvicorn) in front of the session's simulator, embedded store."""
    server = start_proxy(simulator.url)
    yield server
    server.stop()


@pytest.fixture(scope="module", autouse=True)
def _close_sdk_clients() -> Iterator[None]:
    yield
    SDK.close()
