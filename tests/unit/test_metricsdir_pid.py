"""Multiprocess metrics (telemetry/metricsdir.py): prometheus_client asks for the pid on every
sample update; ours answers from memory (no getpid syscall per update) and still tells a
forked child's pid."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, values

from proxy.telemetry import metricsdir


@pytest.fixture
def identifier(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[], int]:
    """What `enable_in_child` hands prometheus_client as the process identifier."""
    given: list[Callable[[], int]] = []
    made = values.MultiProcessValue

    def spy(process_identifier: Callable[[], int] = os.getpid) -> Any:
        given.append(process_identifier)
        return made(process_identifier)  # type: ignore[no-untyped-call]

    monkeypatch.setenv(metricsdir.ENV, str(tmp_path))
    monkeypatch.setattr(values, "MultiProcessValue", spy)
    monkeypatch.setattr(values, "ValueClass", values.ValueClass)  # restored after the test
    metricsdir.enable_in_child()
    [ident] = given
    return ident


def test_sample_updates_ask_no_pid_of_the_kernel(identifier: Callable[[], int],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    real = os.getpid

    def counting() -> int:
        asked.append(1)
        return real()

    assert identifier is not os.getpid
    monkeypatch.setattr(os, "getpid", counting)
    counter = Counter("t_requests", "t", registry=CollectorRegistry())
    for _ in range(12):
        counter.inc()
    assert identifier() == real()
    assert asked == []


def test_a_forked_child_is_told_its_own_pid(identifier: Callable[[], int]) -> None:
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        os.write(writer, str(identifier()).encode())
        os._exit(0)
    os.close(writer)
    try:
        told = int(os.read(reader, 32))
    finally:
        os.close(reader)
        os.waitpid(child, 0)
    assert told == child
    assert identifier() == os.getpid()
