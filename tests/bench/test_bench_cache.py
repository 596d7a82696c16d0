"""`python -m bench.cache` end to end, tiny: every row is printed, with a cache state checked on
every request (a miss row that hit, or a hit row that missed, aborts the run)."""

from __future__ import annotations

import pytest

from bench.cache import main

pytestmark = [pytest.mark.e2e, pytest.mark.bench_rows]


def test_bench_cache_prints_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--requests", "5", "--max-seconds", "5"]) == 0
    out = capsys.readouterr().out
    for route in ("responses", "chat"):
        for row in ("off      miss", "exact    miss", "semantic miss", "exact miss adds",
                    "exact    hit", "semantic hit"):
            assert f"{route:9s} {row}" in out, out
