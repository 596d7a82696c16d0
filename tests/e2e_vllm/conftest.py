"""Fixtures of the real-vLLM suite (`make e2e-vllm`; deselected from `make test` by the
`e2e_vllm` marker): one vLLM at a time (hermes, then llama3_json), the proxy in front of it,
the official SDK as the client.

Nothing here skips: a test that cannot run fails (a skip is turned into a failure), so the
target never passes on what it did not try."""

from __future__ import annotations

from collections.abc import Generator, Iterator

import openai
import pytest

from tests.e2e_vllm import fleet
from tests.e2e_vllm.fleet import Vllm
from tests.e2e_vllm.provision import provision
from tests.support.clients import SDK
from tests.support.servers import ServerProcess, start_proxy

KEY = "sk-test"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # One vLLM runs at a time (two cores): every hermes test first, then the llama3_json ones.
    items.sort(key=lambda item: item.get_closest_marker("llama3_json") is not None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.get_closest_marker("e2e_vllm") is not None:
        report.outcome = "failed"
        report.longrepr = f"skipped in the real-vLLM suite, which never skips: {report.longrepr}"


@pytest.fixture(scope="session")
def vllm_fleet() -> Iterator[fleet.Fleet]:
    fleet.install_sigterm_handler()  # only in this suite's runs: CI's timeout stops our servers
    provisioned = None if fleet.external_url() else provision()
    pool = fleet.Fleet(provisioned)
    yield pool
    pool.close()
    fleet.stop_all()


@pytest.fixture(scope="module")
def vllm(vllm_fleet: fleet.Fleet) -> Vllm:
    """The hermes vLLM (or E2E_VLLM_URL's server)."""
    return vllm_fleet.get("hermes")


@pytest.fixture(scope="module")
def proxy(vllm: Vllm) -> Iterator[ServerProcess]:
    """One proxy in front of the module's vLLM, embedded store."""
    server = start_proxy(vllm.url)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(proxy: ServerProcess) -> openai.OpenAI:
    return SDK.get(proxy.url, KEY)


@pytest.fixture(scope="module", autouse=True)
def _close_sdk_clients() -> Iterator[None]:
    yield
    SDK.close()
