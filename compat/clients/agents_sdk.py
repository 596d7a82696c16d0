"""openai-agents: an Agent with a function tool, run through the Responses model against the
proxy; the simulator calls the tool (its name is in the prompt), the SDK runs it and sends the
output back, and the final answer carries the tool's result."""

from __future__ import annotations

import asyncio

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from checks import API_KEY, BASE_URL, MODEL, check, expect, finish
from openai import AsyncOpenAI

set_tracing_disabled(True)  # no traces to OpenAI's servers
calls: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return f"sunny in {city}"


@check("agent with a function tool")
def _agent() -> None:
    client = AsyncOpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0, timeout=60)
    agent = Agent(name="weather", instructions="Answer with the weather.",
                  model=OpenAIResponsesModel(model=MODEL, openai_client=client),
                  tools=[get_weather])

    async def run() -> str:
        try:
            result = await Runner.run(agent, "please call get_weather city=Oslo", max_turns=4)
            return str(result.final_output)
        finally:
            await client.close()

    final = asyncio.run(run())
    expect(calls == ["Oslo"], f"tool calls {calls}")
    expect("get_weather=sunny in Oslo" in final, f"final output {final!r}")


@check("agent streamed")
def _streamed() -> None:
    client = AsyncOpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0, timeout=60)
    agent = Agent(name="echo", instructions="Be brief.",
                  model=OpenAIResponsesModel(model=MODEL, openai_client=client))

    async def run() -> tuple[str, str]:
        try:
            result = Runner.run_streamed(agent, "hello agents")
            deltas = []
            async for event in result.stream_events():
                if event.type == "raw_response_event" and \
                        event.data.type == "response.output_text.delta":
                    deltas.append(event.data.delta)
            return "".join(deltas), str(result.final_output)
        finally:
            await client.close()

    streamed, final = asyncio.run(run())
    expect(streamed == final and "hello agents" in final, f"{streamed!r} vs {final!r}")


finish()
