"""proxy/telemetry/metricsdir.py: the supervisor's directory, and when a process reads it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from proxy.telemetry import metricsdir


def test_an_inherited_variable_alone_does_not_switch_a_process(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Samples of this process are plain floats: reading files nobody writes would lose them.
    monkeypatch.setenv(metricsdir.ENV, str(tmp_path))
    assert metricsdir.multiprocess_dir() is None


def test_the_supervisor_makes_names_and_removes_a_private_directory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(metricsdir.ENV, raising=False)
    made = metricsdir.MetricsDir.create()
    try:
        assert os.environ[metricsdir.ENV] == made.path
        assert os.path.isdir(made.path) and os.listdir(made.path) == []
        assert oct(os.stat(made.path).st_mode & 0o777) == "0o700"  # private to its user
        made.child_exited(999_999)  # nothing of that child: no error
    finally:
        made.remove()
    assert not os.path.exists(made.path) and metricsdir.ENV not in os.environ
