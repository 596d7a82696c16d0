"""bench/machine.py's one measured figure: the CPU a wake-up from a sleep costs, recorded with
every run and printed in its header (bench/report.py)."""

from __future__ import annotations

from bench import machine, report


def test_a_wake_up_is_measured_in_cpu_microseconds() -> None:
    cpu = machine.wake_cpu_us(0.001, 5)
    assert 0 <= cpu < 5_000, cpu  # charged per wake-up: never more than a few ms


def test_the_header_says_what_a_wake_up_costs_when_measured() -> None:
    (line,) = report._wake_line({"wake_cpu_us": {"1ms": 21.5, "13.7ms": 74.0}})
    assert "21.5 µs after a 1ms sleep" in line and "74 µs after a 13.7ms sleep" in line
    assert report._wake_line({}) == []  # a run saved before it was measured
