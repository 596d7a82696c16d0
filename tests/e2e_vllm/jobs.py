"""Background jobs against a real vLLM: a cancel that must reach vLLM (its running gauge, and
no finished request), and a stream read again with `starting_after`. Shared by the embedded-store
module and the Redis pair module (there: created on one instance, cancelled or replayed on the
other)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai

from tests.e2e_vllm.fleet import Vllm, metric_sum
from tests.support.conformance import check_stream
from tests.support.servers import ServerProcess, wait_for, wait_status
from tests.support.sse import data_payloads

KEY = "sk-test"
AUTH = {"authorization": f"Bearer {KEY}"}
TERMINAL = {"completed", "incomplete", "failed", "cancelled"}
# Far more tokens than the cancel waits for (minutes at CPU speed): a drop of the running
# gauge within CANCEL_REACHES_VLLM_WITHIN can only be the abort.
LONG_JOB = {"input": "Count from 1 to 1000, separated by commas.", "max_output_tokens": 2000,
            "temperature": 0}
JOB_STARTS_WITHIN = 120.0
CANCEL_REACHES_VLLM_WITHIN = 20.0
REPLAY_PROMPT = "Name three fruits."


def finished(vllm: Vllm) -> float:
    """Requests vLLM ran to an end of their own (stop, length, ...): a request aborted by its
    client's disconnect is not counted there (0.32 counts no `abort` for it either)."""
    text = httpx.get(vllm.url + "/metrics", timeout=30).text
    return metric_sum(text, "vllm:request_success_total")


def cancel_reaches_vllm(vllm: Vllm, creator: openai.OpenAI, canceller: openai.OpenAI) -> str:
    """A long background job created through `creator`, cancelled through `canceller` once vLLM
    runs it; vLLM then runs nothing, and the job is not among the requests it finished: it was
    aborted. Returns the job's id."""
    assert vllm.gauge("vllm:num_requests_running") == 0, "vLLM is busy before the test"
    before = finished(vllm)
    job = creator.responses.create(model=vllm.model, background=True, **LONG_JOB)
    assert wait_for(lambda: vllm.gauge("vllm:num_requests_running") >= 1, JOB_STARTS_WITHIN), \
        "the job never reached vLLM"
    cancelled = canceller.responses.cancel(job.id)
    assert cancelled.status == "cancelled"
    assert wait_for(lambda: vllm.gauge("vllm:num_requests_running") == 0,
                    CANCEL_REACHES_VLLM_WITHIN), "vLLM still runs the cancelled job"
    assert finished(vllm) == before, "the job ran to its end in vLLM"
    return job.id


def cancelled_job_is_kept(reader: ServerProcess, job_id: str) -> None:
    stored = wait_status(reader, job_id, TERMINAL, 30, headers=AUTH)
    assert stored["status"] == "cancelled"
    events = sse_get(reader, f"/v1/responses/{job_id}?stream=true")
    assert events[-1]["type"] == "response.cancelled"
    check_stream(events)


def sse_get(server: ServerProcess, path: str) -> list[dict[str, Any]]:
    with httpx.stream("GET", server.url + path, headers=AUTH, timeout=300) as response:
        assert response.status_code == 200
        return data_payloads(b"".join(response.iter_raw()))


def stream_cut_then_replayed(vllm: Vllm, creator: ServerProcess, reader: ServerProcess,
                             k: int = 5) -> list[dict[str, Any]]:
    """A background stream on `creator` left after k+1 events, then read again on `reader`
    from `starting_after=k` and whole: the pieces join to the whole, the job ran to its end
    and its text is vLLM's own answer. Returns the whole stream."""
    body = {"model": vllm.model, "input": REPLAY_PROMPT, "max_output_tokens": 30,
            "temperature": 0, "background": True, "stream": True}
    with httpx.stream("POST", creator.url + "/v1/responses", json=body, headers=AUTH,
                      timeout=300) as response:
        assert response.status_code == 200
        buffer = b""
        for chunk in response.iter_raw():
            buffer += chunk
            if buffer.count(b"\n\n") >= k + 1:
                break
    first = data_payloads(buffer)[:k + 1]
    response_id = first[0]["response"]["id"]
    wait_status(reader, response_id, TERMINAL, 120, headers=AUTH)
    rest = sse_get(reader, f"/v1/responses/{response_id}?stream=true&starting_after={k}")
    full = sse_get(reader, f"/v1/responses/{response_id}?stream=true")
    assert first + rest == full
    assert full[-1]["type"] == "response.completed"
    check_stream(full)
    expected = vllm.chat(messages=[{"role": "user", "content": REPLAY_PROMPT}], max_tokens=30)
    text = "".join(e["delta"] for e in full if e["type"] == "response.output_text.delta")
    assert text == expected["choices"][0]["message"]["content"]
    sdk = openai.OpenAI(base_url=reader.url + "/v1", api_key=KEY, max_retries=0)
    with sdk, sdk.responses.stream(response_id=response_id, starting_after=k) as stream:
        resumed = [(e.type, e.sequence_number) for e in stream]
    assert resumed == [(e["type"], e["sequence_number"]) for e in full[k + 1:]]
    return full


def settle(vllm: Vllm, within: float = 60.0) -> None:
    """vLLM idle again (a previous test's request ended), bounded."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and vllm.gauge("vllm:num_requests_running") > 0:
        time.sleep(0.2)
