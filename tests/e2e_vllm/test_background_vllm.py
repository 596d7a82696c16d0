"""Background jobs on one proxy (embedded store) in front of a real vLLM: a cancel reaches
vLLM (its running gauge drops before the job could end), and a stream left midway is read
again with `starting_after`, equal to the whole and to vLLM's own text."""

from __future__ import annotations

import openai
import pytest

from tests.e2e_vllm.fleet import Vllm
from tests.e2e_vllm.jobs import (
    cancel_reaches_vllm,
    cancelled_job_is_kept,
    settle,
    stream_cut_then_replayed,
)
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.e2e_vllm


def test_cancel_of_a_background_job_aborts_it_in_vllm(client: openai.OpenAI, vllm: Vllm,
                                                      proxy: ServerProcess) -> None:
    settle(vllm)
    job_id = cancel_reaches_vllm(vllm, client, client)
    cancelled_job_is_kept(proxy, job_id)


def test_a_background_stream_is_replayed_from_starting_after(vllm: Vllm,
                                                             proxy: ServerProcess) -> None:
    settle(vllm)
    stream_cut_then_replayed(vllm, proxy, proxy)
