"""`python -m bench.servers`, tiny (a child process, as `make bench` runs it): the same proxy
app under each ASGI server answers the short load with every stream checked (the matrix's own
checks), and each server's row has its CPU measured. granian is only measured where it is
installed (it is not a dependency of the proxy)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.bench_rows]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_every_server_serves_the_short_load_without_errors() -> None:
    # A launched uvicorn variant and granian (where installed): the paths the stack's own
    # `python -m proxy serve` does not take. Two servers keep the test short.
    servers = ["uvicorn-asyncio"]
    if importlib.util.find_spec("granian") is not None:
        servers.append("granian")
    out = subprocess.run(
        [sys.executable, "-m", "bench.servers", "--servers", ",".join(servers), "--loads",
         "short", "--rounds", "1", "--seconds", "0.5"],
        capture_output=True, text=True, timeout=55, check=True).stdout
    rows = {cells[2].strip(): cells for cells in (line.split("|") for line in out.splitlines())
            if len(cells) > 3 and cells[1].strip() == "short"}
    assert set(rows) == set(servers), out
    for server, cells in rows.items():
        assert float(cells[3]) > 0, (server, out)  # proxy CPU per 1k tokens was measured
        assert int(cells[8]) == 0, (server, out)  # no errors: every stream checked whole


def test_each_server_takes_each_place_in_turn() -> None:
    """A row's place in its block (the first after a change of load, say) can favour or hurt
    it: the order rotates per round so that no server always takes the same place."""
    from bench.servers import rotated

    names = ["uvicorn", "granian", "uvicorn-h11"]
    firsts = [rotated(names, index)[0] for index in range(3)]
    assert sorted(firsts) == sorted(names)
    assert all(sorted(rotated(names, index)) == sorted(names) for index in range(5))
