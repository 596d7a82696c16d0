"""`reasoning.effort` reaches vLLM as a value the replica takes: the fleet file's
`reasoning_efforts` (or the model's default table) maps the others to the nearest one, and the
response still echoes what the client asked."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from proxy.app import create_app
from proxy.settings import Settings, build_settings
from tests.conftest import SimControl
from tests.support.servers import ServerProcess


async def answer(settings: Settings, effort: str) -> httpx.Response:
    app = create_app(settings.replace(run_jobs=False))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
            return await http.post("/v1/responses", json={
                "model": "sim-reasoner", "input": "hi", "store": False,
                "reasoning": {"effort": effort}})


async def test_the_fleet_files_efforts_map_what_the_replica_cannot_take(
        tmp_path: Path, simulator: ServerProcess, sim: SimControl) -> None:
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps([{"url": simulator.url,
                                  "reasoning_efforts": ["low", "medium", "high"]}]))
    for asked, sent in (("minimal", "low"), ("none", "low"), ("xhigh", "high")):
        response = await answer(build_settings({"fleet": str(fleet)}, {}), asked)
        assert response.status_code == 200, response.text
        assert sim.stats()["last_request"]["reasoning_effort"] == sent
        assert response.json()["reasoning"]["effort"] == asked


async def test_without_a_table_the_effort_goes_as_asked(
        simulator: ServerProcess, sim: SimControl) -> None:
    response = await answer(Settings.of(upstreams=(simulator.url,)), "xhigh")
    assert response.status_code == 200, response.text
    assert sim.stats()["last_request"]["reasoning_effort"] == "xhigh"
