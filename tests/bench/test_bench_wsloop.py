"""`python -m bench.wsloop` end to end, tiny: every system's row is printed, and every step of
every loop was checked on the way (a step that does not end in `response.completed` with one
function call aborts the run)."""

from __future__ import annotations

import os

import pytest

from bench.wsloop import SYSTEMS, main

pytestmark = pytest.mark.e2e


def test_bench_wsloop_prints_a_row_per_system(capsys: pytest.CaptureFixture[str]) -> None:
    cores = os.sched_getaffinity(0)
    assert main(["--steps", "3", "--loops", "1", "--max-seconds", "30"]) == 0
    out = capsys.readouterr().out
    # The proxy on a core of its own, the rest on the others (plan_pinning), and this
    # process's cores given back once the run is over.
    assert os.sched_getaffinity(0) == cores
    if len(cores) >= 2:
        assert "proxy alone on core" in out, out
    assert set(SYSTEMS) == {"http+sse store", "ws store", "http+sse resend", "ws local"}
    for name in SYSTEMS:
        assert f"{name:16s} loops= 1  per step" in out, out


@pytest.mark.bench_rows
def test_bench_wsloop_beside_a_baseline_prints_both_proxies(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--steps", "2", "--loops", "2", "--max-seconds", "60",
                 "--baseline", "HEAD"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "ms |" in line]
    assert [row.split(" | ")[0].lstrip("| ") for row in rows] == list(SYSTEMS), out
