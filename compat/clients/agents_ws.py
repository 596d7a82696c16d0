"""openai-agents over WebSocket: `responses_websocket_session()` keeps one socket to the proxy's
`GET /v1/responses` for every turn of its runs. An agent with a function tool (the simulator
calls it, the SDK runs it and sends the output back as the next `response.create` on the same
socket), then a streamed run and a chained run (`auto_previous_response_id`) on that socket.

That the socket was used, not HTTP, is seen on the proxy's `/metrics`: no `POST /v1/responses`
was answered while the session ran."""

from __future__ import annotations

import asyncio
import urllib.request

from agents import Agent, function_tool, responses_websocket_session, set_tracing_disabled
from checks import API_KEY, BASE_URL, MODEL, check, expect, finish

set_tracing_disabled(True)  # no traces to OpenAI's servers
calls: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return f"sunny in {city}"


def http_creates() -> float:
    """`POST /v1/responses` answered so far, from the proxy's Prometheus text."""
    metrics = BASE_URL.rsplit("/v1", 1)[0] + "/metrics"
    with urllib.request.urlopen(metrics, timeout=10) as answer:
        text = answer.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("proxy_requests_total{") and 'route="/v1/responses"' in line
               and 'method="POST"' in line)


async def session_runs() -> tuple[str, str, str, str | None, str | None]:
    async with responses_websocket_session(api_key=API_KEY, base_url=BASE_URL) as session:
        tools = Agent(name="weather", instructions="Answer with the weather.", model=MODEL,
                      tools=[get_weather])
        first = await session.run(tools, "please call get_weather city=Oslo", max_turns=4)
        echo = Agent(name="echo", instructions="Be brief.", model=MODEL)
        streamed = session.run_streamed(echo, "hello agents")
        deltas = []
        async for event in streamed.stream_events():
            if event.type == "raw_response_event" and \
                    event.data.type == "response.output_text.delta":
                deltas.append(event.data.delta)
        chained = await session.run(echo, "again please", auto_previous_response_id=True,
                                    previous_response_id=streamed.last_response_id)
        return (str(first.final_output), "".join(deltas), str(streamed.final_output),
                streamed.last_response_id, chained.last_response_id)


results: tuple[str, str, str, str | None, str | None] | None = None


@check("agent runs over one WebSocket session")
def _session() -> None:
    global results
    before = http_creates()
    results = asyncio.run(session_runs())
    after = http_creates()
    expect(after == before, f"{after - before:.0f} creates went over HTTP, not the socket")


@check("agent with a function tool over WebSocket")
def _tool() -> None:
    expect(results is not None, "the session did not run")
    assert results is not None
    expect(calls == ["Oslo"], f"tool calls {calls}")
    expect("get_weather=sunny in Oslo" in results[0], f"final output {results[0]!r}")


@check("agent streamed and chained over WebSocket")
def _streamed() -> None:
    expect(results is not None, "the session did not run")
    assert results is not None
    _, deltas, final, streamed_id, chained_id = results
    expect(deltas == final and "hello agents" in final, f"{deltas!r} vs {final!r}")
    expect(bool(streamed_id) and bool(chained_id) and streamed_id != chained_id,
           f"response ids {streamed_id!r}, {chained_id!r}")


finish()
