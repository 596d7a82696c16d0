"""`/metrics`: Prometheus text with per-request counters (by route template, never by raw path),
open streams, and finished responses by status."""

from __future__ import annotations

import httpx


async def test_requests_streams_and_responses_are_counted(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/responses/resp_missing")).status_code == 404
    body = {"model": "sim-model", "input": "count me", "store": False}
    assert (await client.post("/v1/responses", json=body)).status_code == 200
    streamed = await client.post("/v1/responses", json={**body, "stream": True})
    assert streamed.status_code == 200
    text = (await client.get("/metrics")).text
    assert 'proxy_requests_total{route="/v1/responses/{response_id}",status="404"} 1' in text
    assert 'proxy_requests_total{route="/v1/responses",status="200"} 2' in text
    assert 'proxy_responses_total{status="completed"} 2' in text
    assert 'proxy_streams_active{route="/v1/responses"} 0' in text  # opened, then closed
    assert "resp_missing" not in text
    assert "# TYPE proxy_requests_total counter" in text
