"""The official Python SDK: the stream helper, a background response polled to the end, a
background stream cut and resumed with `starting_after`, a function tool round trip."""

from __future__ import annotations

import time

from checks import API_KEY, BASE_URL, MODEL, check, expect, finish
from openai import OpenAI

client = OpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0, timeout=60)


@check("stream helper")
def _stream() -> None:
    with client.responses.stream(model=MODEL, input="hello from the python sdk") as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    expect(final.status == "completed", f"status {final.status}")
    expect(final.output_text == text, "deltas differ from the final text")
    expect("hello from the python sdk" in text, f"unexpected answer {text!r}")


@check("background")
def _background() -> None:
    job = client.responses.create(model=MODEL, input="a background job [[sim tokens=20]]",
                                  background=True)
    expect(job.status in ("queued", "in_progress"), f"first status {job.status}")
    deadline = time.monotonic() + 30
    while job.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.2)
        job = client.responses.retrieve(job.id)
    expect(job.status == "completed", f"ended {job.status}")
    expect(len(job.output_text.split()) == 20, f"answer {job.output_text!r}")


@check("resume with starting_after")
def _resume() -> None:
    stream = client.responses.create(model=MODEL, background=True, stream=True,
                                     input="resume me [[sim tokens=30 delay_ms=20]]")
    seen = []
    for event in stream:
        seen.append(event)
        if len(seen) == 5:
            break
    stream.close()
    response_id = seen[0].response.id
    last = seen[-1].sequence_number
    rest = list(client.responses.retrieve(response_id, stream=True, starting_after=last))
    expect(rest and rest[0].sequence_number == last + 1,
           f"resumed at {rest[0].sequence_number if rest else None}, wanted {last + 1}")
    expect(rest[-1].type == "response.completed", f"ended with {rest[-1].type}")
    text = "".join(e.delta for e in seen + rest if e.type == "response.output_text.delta")
    expect(text == rest[-1].response.output_text and len(text.split()) == 30,
           f"the two halves make {text!r}, the answer is {rest[-1].response.output_text!r}")


@check("function tool round trip")
def _tool() -> None:
    tools = [{"type": "function", "name": "get_weather", "description": "Weather in a city.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"], "additionalProperties": False},
              "strict": True}]
    first = client.responses.create(model=MODEL, tools=tools,
                                    input="please call get_weather city=Paris")
    calls = [item for item in first.output if item.type == "function_call"]
    expect(len(calls) == 1 and calls[0].name == "get_weather", f"output {first.output}")
    expect(calls[0].arguments == '{"city": "Paris"}', f"arguments {calls[0].arguments}")
    second = client.responses.create(
        model=MODEL, tools=tools, previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                "output": "sunny"}])
    expect(second.output_text == "Tool results: get_weather=sunny", second.output_text)


finish()
