"""`python -m bench.fleet` end to end, tiny: three simulators with the prefill cost on, a proxy
per routing policy, the even and the slow scenario; every row is printed, no turn fails, and
the simulators' prefix counters saw the shared system prompt hit."""

from __future__ import annotations

import re

import pytest

from bench.fleet import main

pytestmark = [pytest.mark.e2e, pytest.mark.bench_rows]


def test_bench_fleet_prints_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--conversations", "2", "--turns", "2", "--tokens", "4",
                 "--token-delay-ms", "0", "--max-seconds", "20"]) == 0
    out = capsys.readouterr().out
    for scenario in ("even", "slow"):
        for policy in ("affinity", "round_robin", "least_loaded"):
            line = next(row for row in out.splitlines()
                        if row.startswith(f"{scenario:6s} {policy} "))
            assert "turns    4" in line and "errors 0" in line, line
            hits = re.search(r"prefix hits\s+([\d.]+)%", line)
            assert hits is not None and float(hits.group(1)) > 0, line
        for policy in ("round_robin", "least_loaded"):
            assert f"{scenario:6s} {policy:12s} vs affinity" in out
