"""`make bench` runs the proxy with default flags everywhere; a row that needs a flag
passes only that one, and says why. Checked on the command lines the bench modules build (no
servers started)."""

from __future__ import annotations

import shutil
from pathlib import Path

from bench import cache, fleet
from bench.procs import Pinning
from bench.stack import Stack, StackOptions

ADDRESSES = {"--host", "--port", "--upstream", "--redis-url"}


def flags(args: list[str]) -> list[str]:
    """The `--flags` of a `proxy serve` command line other than its addresses."""
    serve = args[args.index("serve") + 1:]
    return [a for a in serve if a.startswith("--") and a not in ADDRESSES]


def stack(tmp_path: Path, background: int | None = None) -> Stack:
    made = Stack(StackOptions(log_dir=tmp_path, pinning=Pinning(None, None, "unpinned"),
                              background_concurrency=background))
    shutil.rmtree(made._redis_dir, ignore_errors=True)
    return made


def test_the_matrix_proxy_passes_a_flag_only_for_background_rows(tmp_path: Path) -> None:
    plain = stack(tmp_path)
    assert flags(plain.proxy.args) == []
    assert plain.flags_note.startswith("every proxy flag at its default")
    background = stack(tmp_path, 256)
    assert flags(background.proxy.args) == ["--worker-concurrency"]
    assert "--worker-concurrency 256" in background.flags_note
    assert "background rows" in background.flags_note  # and says why


def test_cache_and_fleet_rows_pass_only_the_flag_they_measure() -> None:
    assert cache.MODE_FLAGS["off"] == []  # the default mode
    assert cache.MODE_FLAGS["exact"] == ["--cache", "exact"]
    assert fleet.routing_flags("affinity") == []  # the default policy
    assert fleet.routing_flags("round_robin") == ["--routing", "round_robin"]
