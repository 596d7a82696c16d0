"""`python -m bench.vectors` end to end, small: the ingestion row (a PDF polled to completed)
and every search row are printed."""

from __future__ import annotations

import pytest

from bench.vectors import main

pytestmark = [pytest.mark.e2e, pytest.mark.bench_rows]


def test_bench_vectors_prints_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--pages", "5", "--searches", "5", "--max-seconds", "5"]) == 0
    out = capsys.readouterr().out
    assert "ingestion: 5 PDF pages in" in out, out
    assert "search over HTTP" in out, out
    for chunks in ("10,000", "100,000"):
        assert f"search {chunks:>7} chunks x 256 dims" in out, out
