"""bench/instructions.py: the arithmetic that turns callgrind's dumps into per-token and
per-request figures, and the shim that stretches the proxy's clocks under callgrind (the run
itself needs valgrind and minutes: `python -m bench.instructions`)."""

from __future__ import annotations

import pytest
import uvicorn

from bench import instructions
from bench.instructions import Counts, Figures
from bench.systems import SYSTEMS
from proxy.services.eventlog import writer
from proxy.store.connection import held


def test_idle_work_is_taken_out_in_proportion_to_the_span() -> None:
    idle = Counts(proxy=1_000, redis=100, seconds=10.0)
    assert Counts(proxy=5_000, redis=700, seconds=20.0).less_idle(idle) == (3_000, 500)


def test_the_ratio_counts_redis_on_both_sides() -> None:
    figures = Figures(per_token={"off": (70_000.0, 300.0), "on": (84_000.0, 7_200.0)},
                      per_request={"off": (1.0, 0.0), "on": (1.0, 0.0)},
                      setup={"off": (1.0, 0.0), "on": (1.0, 0.0)})
    assert figures.ratio() == pytest.approx(91_200 / 70_300)
    (row,) = instructions.table({"current": figures})[2:]
    assert row.startswith("| current | 70.0k + 0.3k | 84.0k + 7.2k | 1.297 |")


async def _app(scope: object, receive: object, send: object) -> None:
    """An ASGI app for `uvicorn.Config` to hold (never served)."""


def test_the_shim_stretches_the_stored_paths_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer.EventLogHub, "__init__", writer.EventLogHub.__init__)
    monkeypatch.setattr(held, "_EARLY", held._EARLY)
    monkeypatch.setattr(uvicorn.Config, "__init__", uvicorn.Config.__init__)
    monkeypatch.setenv("BENCH_TIME_SCALE", "20")
    started: list[list[str]] = []
    monkeypatch.setattr("proxy.cli.main", started.append)
    monkeypatch.setattr("sys.argv", ["-c", "serve", "--port", "1"])
    keep_alive = uvicorn.Config(_app).timeout_keep_alive
    exec(compile(instructions._LAUNCH, "<launch>", "exec"), {})
    assert started == [["serve", "--port", "1"]]
    hub = writer.EventLogHub(None, ttl=60, event_ttl=60,  # type: ignore[arg-type]
                             first_window=writer.FIRST_WINDOW)
    assert hub.window == pytest.approx(writer.WINDOW * 20)
    assert hub.first_window == pytest.approx(writer.FIRST_WINDOW * 20)
    assert pytest.approx(0.001 * 20) == held._EARLY
    # The server's keep-alive timeout, stretched too.
    assert uvicorn.Config(_app).timeout_keep_alive == pytest.approx(keep_alive * 20)


def test_waves_must_differ_in_length() -> None:
    with pytest.raises(SystemExit):
        instructions.main(["--tokens", "96", "16", "--baseline", ""])


def test_the_set_up_wave_can_wait_for_its_first_token() -> None:
    system = SYSTEMS["responses-store"]
    assert "[[sim tokens=2 delay_ms=30000 ttft_ms=2000]]" in system.body(2, 30000, 2000)["input"]
    assert "ttft_ms" not in system.body(2, 30000)["input"]  # by default, at once
