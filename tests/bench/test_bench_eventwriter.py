"""`python -m bench.eventwriter`, tiny: the writer driven as a stored stream drives it, every
token reaching the store once, its Python opcodes counted per function."""

from __future__ import annotations

from bench import eventwriter


def test_every_token_reaches_the_store_once_and_its_opcodes_are_counted() -> None:
    figures = eventwriter.measure(streams=3, tokens=50, per_window=5)
    assert figures.tokens == 150 and figures.stored == 150
    assert figures.flushes >= 1
    # `record` runs once a token; the flushes' packing shows up beside it
    assert figures.opcodes["LogHandle.record"] > 10
    assert "flush_calls" in figures.opcodes and "_flushed" not in figures.opcodes
    assert figures.record_us > 0 and figures.flush_us > 0
    lines = eventwriter.table(figures, top=3)
    assert len(lines) == 3 + 3 and "LogHandle.record" in lines[3]


def test_full_entries_run_no_compact_cut() -> None:
    figures = eventwriter.measure(streams=2, tokens=40, per_window=5, compact=False)
    assert figures.stored == 80
    assert "_compact" not in figures.opcodes
    compact = eventwriter.measure(streams=2, tokens=40, per_window=5)
    assert "_compact" in compact.opcodes


def test_untraced_it_counts_no_opcodes_and_still_stores_every_token() -> None:
    figures = eventwriter.measure(streams=2, tokens=20, per_window=5, traced=False)
    assert figures.opcodes == {} and figures.stored == 40
