"""The keys file read again on SIGHUP, under `serve --workers 2`: the
supervisor forwards the signal to both processes, so a key added to the file is accepted and a
key taken out is refused by every process, without a restart; a broken file leaves the keys as
they were."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support.servers import ServerProcess, start_proxy

pytestmark = pytest.mark.e2e

TRIES = 16  # fresh connections per check: the kernel spreads them over both processes
WITHIN = 10.0  # seconds the reload may take to reach both processes (a bound)


def write(path: Path, *keys: str) -> None:
    path.write_bytes(orjson.dumps({"keys": [{"key": k, "name": k} for k in keys]}))


@pytest.fixture
def served(simulator: ServerProcess, redis_server: ServerProcess,
           tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    path = tmp_path / "keys.json"
    write(path, "sk-old")
    proxy = start_proxy(simulator.url, "--workers", "2", "--keys-file", str(path),
                        redis_url=f"redis://127.0.0.1:{redis_server.port}/0")
    try:
        yield proxy, path
    finally:
        proxy.stop(timeout=30)


def statuses(proxy: ServerProcess, key: str) -> set[int]:
    return {httpx.get(proxy.url + "/v1/models", timeout=10,
                      headers={"authorization": f"Bearer {key}"}).status_code
            for _ in range(TRIES)}


def settle(proxy: ServerProcess, key: str, want: int) -> set[int]:
    deadline = time.monotonic() + WITHIN
    seen = statuses(proxy, key)
    while seen != {want} and time.monotonic() < deadline:
        time.sleep(0.1)
        seen = statuses(proxy, key)
    return seen


def test_sighup_reloads_the_keys_file_in_every_process(
        served: tuple[ServerProcess, Path]) -> None:
    proxy, path = served
    assert proxy.proc is not None
    assert statuses(proxy, "sk-old") == {200}
    assert statuses(proxy, "sk-new") == {401}
    write(path, "sk-new")
    os.kill(proxy.proc.pid, signal.SIGHUP)
    assert settle(proxy, "sk-new", 200) == {200}
    assert statuses(proxy, "sk-old") == {401}
    # A broken file: logged, and the keys in force stay.
    path.write_text('{"keys": [{"key": "sk-x", "rmp": 1}]}')
    os.kill(proxy.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + WITHIN
    while "keys file not reloaded" not in proxy.full_output() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "keys file not reloaded" in proxy.full_output()
    assert statuses(proxy, "sk-new") == {200}
    assert proxy.proc.poll() is None  # the supervisor and its children are still serving
