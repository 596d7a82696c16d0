"""The queue's job kinds come from the spec, not the entry's id (services/jobs/kinds.py), and
the entries the previous release queued still read as what they were."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
import pytest

from proxy.services.generation.spec import JobSpec, UnreadableSpec
from proxy.services.jobs.kinds import RESPONSE, kind_of
from proxy.services.jobs.runner import Worker
from proxy.services.process.loops import TaskSet
from proxy.services.vectors.ingest import KIND as INGESTION
from proxy.services.vectors.ingest import job_of
from proxy.settings import JobSettings
from proxy.store.base import Job

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
# Exactly what the previous release queued (services/vectors/ingest.py `job_of`, and
# services/responses/create.py `_submit` before specs named their kind).
PREVIOUS_INGESTION = (b'{"kind":"vector_store_file","tenant":"t","vector_store_id":"vs_1",'
                      b'"file_id":"file-1"}')
PREVIOUS_RESPONSE = orjson.dumps({"version": 1, "tenant": "t", "model": "m", "chat": CHAT,
                                  "affinity": None, "home": None, "service_tier": None,
                                  "seal": False, "conversation": None, "request_id": None})


def test_the_previous_releases_entries_keep_their_kinds() -> None:
    assert kind_of(PREVIOUS_INGESTION) == INGESTION
    assert kind_of(PREVIOUS_RESPONSE) == RESPONSE
    assert JobSpec.from_json(PREVIOUS_RESPONSE) == JobSpec("t", "m", CHAT)


def test_todays_specs_name_their_kind() -> None:
    assert orjson.loads(JobSpec("t", "m", CHAT).to_json())["kind"] == RESPONSE
    assert kind_of(JobSpec("t", "m", CHAT).to_json()) == RESPONSE
    assert kind_of(job_of("t", "vs_1", "file-1")[1]) == INGESTION


class _Queue:
    def __init__(self) -> None:
        self.done_ids: list[str] = []

    async def done(self, entry_id: str) -> None:
        self.done_ids.append(entry_id)


async def test_the_worker_dispatches_by_the_specs_kind_not_the_entry_id() -> None:
    # An id without the ingestion prefix: the worker used to run it as a response.
    ingested: list[bytes] = []

    async def ingest(spec: bytes) -> None:
        ingested.append(spec)

    queue = _Queue()
    generations = SimpleNamespace(store=None, tasks=TaskSet(), metrics=None)
    worker = Worker(queue, generations, JobSettings(), ttl=60,  # type: ignore[arg-type]
                    ingest=ingest)
    worker._launch(Job("1-0", "entry_without_prefix", PREVIOUS_INGESTION))
    await worker._running["entry_without_prefix"].task
    assert ingested == [PREVIOUS_INGESTION] and queue.done_ids == ["1-0"]


@pytest.mark.parametrize("spec", [b"not json", b"[1]", b'{"kind": 7}'])
def test_a_spec_naming_no_kind_is_a_responses(spec: bytes) -> None:
    assert kind_of(spec) == RESPONSE


def test_a_response_worker_refuses_another_kinds_spec() -> None:
    with pytest.raises(UnreadableSpec, match="vector_store_file"):
        JobSpec.from_json(PREVIOUS_INGESTION)
