"""openai-agents over the WebSocket mode: `responses_websocket_session()`
runs an agent with a function tool on one socket to a real `serve` process. Skipped when
`openai-agents` is not installed (it is not a test dependency: `make compat` runs it too)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import SimControl
from tests.support.servers import ServerProcess, start_proxy

agents: Any = pytest.importorskip("agents")

pytestmark = pytest.mark.e2e

KEY = "sk-ws-agents"


@pytest.fixture(scope="module")
def proxy(simulator: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--api-key", KEY)
    yield server
    server.stop()


def http_creates(server: ServerProcess) -> float:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("proxy_requests_total{") and 'route="/v1/responses"' in line
               and 'method="POST"' in line)


def test_an_agent_runs_a_tool_over_one_websocket_session(proxy: ServerProcess,
                                                         sim: SimControl) -> None:
    agents.set_tracing_disabled(True)
    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"sunny in {city}"

    async def run() -> tuple[str, str]:
        async with agents.responses_websocket_session(
                api_key=KEY, base_url=proxy.url + "/v1") as session:
            agent = agents.Agent(name="weather", instructions="Answer with the weather.",
                                 model="sim-model", tools=[get_weather])
            first = await session.run(agent, "please call get_weather city=Oslo", max_turns=4)
            again = await session.run(agent, "thanks", max_turns=2,
                                      previous_response_id=first.last_response_id)
            return str(first.final_output), str(again.final_output)

    before = http_creates(proxy)
    first, again = asyncio.run(asyncio.wait_for(run(), 120))
    sent = sim.stats()["last_request"]["messages"]
    assert calls == ["Oslo"]
    assert "get_weather=sunny in Oslo" in first
    assert "thanks" in again
    assert http_creates(proxy) == before  # every create went over the socket
    # ...and the count is one that moves: an HTTP create shows in it.
    made = httpx.post(proxy.url + "/v1/responses", json={"model": "sim-model", "input": "hi"},
                      headers={"authorization": f"Bearer {KEY}"}, timeout=30)
    assert made.status_code == 200
    assert http_creates(proxy) == before + 1
    # The second run chained on the first: the simulator saw the whole conversation.
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant",
                                         "user"], sent
