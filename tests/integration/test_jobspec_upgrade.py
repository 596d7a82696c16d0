"""A job queued by the previous release (its spec the untyped dict written before
`JobSpec` had a version) runs to its end on this release's worker."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from proxy.core import types as t
from proxy.runtime import Runtime
from proxy.settings import Settings


async def test_a_job_queued_by_the_previous_release_runs_after_an_upgrade(
        simulator: Any) -> None:
    runtime = await Runtime.open(Settings.of(upstreams=(simulator.url,)), worker=True)
    try:
        worker = runtime.process.worker
        assert worker is not None  # built, not started: the test hands it the job
        await runtime.fleet.refresh()
        created = await runtime.services.responses.create("tenant_a", {
            "model": "sim-model", "input": "hello there", "background": True})
        assert created.body is not None and created.body["status"] == t.S_QUEUED
        [job] = await runtime.queue.take("us", 1, block_ms=0)
        written = orjson.loads(job.spec)
        # The dict as services/responses/create.py wrote it before this release (no `version`).
        previous = {"tenant": "tenant_a", "model": "sim-model", "chat": written["chat"],
                    "affinity": None, "home": written["home"], "service_tier": "auto",
                    "seal": False, "conversation": None, "request_id": None}
        await worker._execute(dataclasses.replace(job, spec=orjson.dumps(previous)))
        record = await runtime.store.get_response_any(job.response_id)
        assert record is not None and record.status == t.S_COMPLETED
        assert record.response["output"][0]["content"][0]["text"]
        assert await runtime.queue.length() == 0  # acknowledged
    finally:
        await runtime.aclose()
