"""A proxy on a real Redis that serves no vector feature never loads numpy
(core/vectors/lazynumpy.py); one with an embedding model loads it at start.

Why it is held: numpy's import loads libquadmath, whose printf hooks send every `sprintf` of the
process down glibc's slow path, and hiredis formats every Redis command's argument lengths
with one (a stored create's packing: ~42k instructions instead of ~20k). A module that imports
numpy (or fakeredis, which imports it) at its top, on the path every instance loads, brings
that back unseen; this test sees it in the serving process's own memory map.

And what uses vectors still works once numpy loads on first use: the vector and semantic-cache
suites run those paths (tests/integration/test_cache_semantic.py and the vector store tests).
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.servers import ServerProcess, start_proxy

# What numpy's import maps into the process (its bundled BLAS's Fortran runtime).
MARKERS = ("libquadmath", "libgfortran", "_multiarray_umath")


def _session_pids(leader: int) -> list[int]:
    """The processes of the server's session (`ServerProcess` starts it as a session leader):
    the server and any worker it forked."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        if int(fields[3]) == leader:  # the session id, after state, ppid, pgrp
            pids.append(int(stat.parent.name))
    return pids


def _mapped(pid: int) -> set[str]:
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    return {marker for marker in MARKERS if marker in text}


def test_a_proxy_on_redis_never_loads_numpy(simulator: ServerProcess,
                                            redis_server: ServerProcess) -> None:
    proxy = start_proxy(simulator.url, redis_url=f"redis://127.0.0.1:{redis_server.port}/0")
    try:
        with httpx.Client(base_url=proxy.url, timeout=30) as client:
            for body in ({"model": "sim-model", "input": "hi [[sim tokens=3]]", "store": True},
                         {"model": "sim-model", "input": "hi [[sim tokens=3]]", "store": True,
                          "stream": True},
                         {"model": "sim-model", "input": "hi [[sim tokens=3]]", "store": False}):
                answer = client.post("/v1/responses", json=body)
                assert answer.status_code == 200, answer.text
        assert proxy.proc is not None
        pids = _session_pids(proxy.proc.pid)
        assert proxy.proc.pid in pids
        # The server's own map is readable here (an unreadable one would pass unchecked).
        assert "python" in Path(f"/proc/{proxy.proc.pid}/maps").read_text()
        loaded = {pid: found for pid in pids if (found := _mapped(pid))}
        assert not loaded, loaded
    finally:
        proxy.stop()


def test_a_proxy_with_an_embedding_model_loads_numpy_at_start(
        simulator: ServerProcess, redis_server: ServerProcess) -> None:
    """With `--embedding-model` vectors will be made: numpy is imported at start (runtime.py),
    not on the event loop at the first search."""
    proxy = start_proxy(simulator.url, "--embedding-model", "sim-embed",
                        redis_url=f"redis://127.0.0.1:{redis_server.port}/0")
    try:
        assert proxy.proc is not None
        assert "libquadmath" in _mapped(proxy.proc.pid)
    finally:
        proxy.stop()


def test_the_marker_is_seen_where_numpy_is_loaded() -> None:
    """The check can fail: this very process (pytest, with numpy imported) shows the marker."""
    import os

    import numpy  # noqa: F401 - loaded for the check
    assert _mapped(os.getpid())


def test_the_stand_in_holds_numpys_names_only() -> None:
    """core/vectors/lazynumpy.py answers for numpy: every name it holds at its top is numpy's
    own (one of its own would stand in front of numpy's), and a read gives numpy's object."""
    import numpy

    from proxy.core.vectors import lazynumpy

    assert lazynumpy.float32 is numpy.float32
    assert lazynumpy.linalg.norm is numpy.linalg.norm
    own = {name: value for name, value in vars(lazynumpy).items()
           if not (name.startswith("__") and name.endswith("__"))}
    assert own and all(getattr(numpy, name) is value for name, value in own.items()), own
