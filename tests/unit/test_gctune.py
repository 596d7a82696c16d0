"""The serving processes' collector settings (proxy/process/gctune.py). Run in a child interpreter:
freezing is process-wide and the test process keeps the defaults."""

from __future__ import annotations

import subprocess
import sys

from proxy.process import gctune

_PROBE = """
import gc
before = gc.get_threshold()
garbage = []
garbage.append(garbage)  # a cycle made during start-up: collected, not frozen
del garbage
from proxy.process.gctune import tune_for_serving
tune_for_serving()
print(before, gc.get_threshold(), gc.get_freeze_count(), gc.garbage == [])
"""


def test_serving_processes_freeze_start_up_and_collect_less_often() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    before, after = out[0] + out[1] + out[2], out[3] + out[4] + out[5]
    assert before != after  # whatever this Python's defaults are, they were replaced
    assert after == f"({gctune.YOUNG},{gctune.MIDDLE},{gctune.OLD})"
    assert int(out[6]) > 1000  # the imports' objects went to the permanent generation
    assert out[7] == "True"


def test_the_cli_tunes_every_serving_command() -> None:
    import inspect

    from proxy import cli

    for command in (cli._serve_one, cli._worker, cli._simulate):
        assert "tune_for_serving()" in inspect.getsource(command), command.__name__
