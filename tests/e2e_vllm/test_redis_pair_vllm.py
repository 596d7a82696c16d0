"""Two proxy instances sharing a redis-server in front of one real vLLM: a job created on one
runs on the other's worker, its stream is read again from the other instance with
`starting_after`, a chain continues across instances with vLLM's token counts, and a cancel
sent to the instance that does not run the job still aborts it in vLLM."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e_vllm.fleet import Vllm
from tests.e2e_vllm.jobs import (
    KEY,
    cancel_reaches_vllm,
    cancelled_job_is_kept,
    settle,
    stream_cut_then_replayed,
)
from tests.support.clients import SDK
from tests.support.servers import ServerProcess, start_proxy, start_redis

pytestmark = pytest.mark.e2e_vllm

Pair = tuple[ServerProcess, ServerProcess]


@pytest.fixture(scope="module")
def pair(vllm: Vllm) -> Iterator[Pair]:
    """`a` runs the jobs (its worker); `b` takes requests only (`--no-worker`)."""
    redis = start_redis()
    url = f"redis://127.0.0.1:{redis.port}/0"
    started: list[ServerProcess] = [redis]
    try:
        a = start_proxy(vllm.url, "--heartbeat-interval", "0.5", redis_url=url)
        started.append(a)
        b = start_proxy(vllm.url, "--no-worker", redis_url=url)
        started.append(b)
        yield a, b
    finally:
        for server in reversed(started):
            server.stop()


def test_a_stream_made_on_one_instance_is_replayed_from_the_other(vllm: Vllm,
                                                                  pair: Pair) -> None:
    a, b = pair
    settle(vllm)
    stream_cut_then_replayed(vllm, creator=b, reader=a)


def test_a_chain_across_instances_has_vllms_token_counts(vllm: Vllm, pair: Pair) -> None:
    a, b = pair
    first = SDK.get(a.url, KEY).responses.create(model=vllm.model, input="Name one color.",
                                                 max_output_tokens=8, temperature=0)
    second = SDK.get(b.url, KEY).responses.create(model=vllm.model, input="Name another one.",
                                                  previous_response_id=first.id,
                                                  max_output_tokens=8, temperature=0)
    history = [{"role": "user", "content": "Name one color."},
               {"role": "assistant", "content": first.output_text},
               {"role": "user", "content": "Name another one."}]
    assert second.usage is not None and second.usage.input_tokens == vllm.tokenize(history)
    expected = vllm.chat(messages=history, max_tokens=8)
    assert second.output_text == expected["choices"][0]["message"]["content"]


def test_a_cancel_on_the_other_instance_aborts_the_job_in_vllm(vllm: Vllm,
                                                               pair: Pair) -> None:
    a, b = pair
    settle(vllm)
    job_id = cancel_reaches_vllm(vllm, SDK.get(a.url, KEY), SDK.get(b.url, KEY))
    cancelled_job_is_kept(a, job_id)

