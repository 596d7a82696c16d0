from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.support.clients import SDK
from tests.support.servers import ServerProcess, start_proxy


@pytest.fixture(scope="module")
def proxy(simulator: ServerProcess) -> Iterator[ServerProcess]:
    """A real proxy process (uvicorn) in front of the session's simulator, embedded store."""
    server = start_proxy(simulator.url)
    yield server
    server.stop()


@pytest.fixture
def openai_client(proxy: ServerProcess) -> Iterator[openai.OpenAI]:
    """The official SDK against the module's proxy, no retries (a failure shows at once)."""
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-test", max_retries=0) as sdk:
        yield sdk


@pytest.fixture(scope="module", autouse=True)
def _close_sdk_clients() -> Iterator[None]:
    yield
    SDK.close()
