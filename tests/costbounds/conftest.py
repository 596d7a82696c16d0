"""The suite's stack: one proxy per module, restarted after a case that left it busy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.costbounds.harness import Stack
from tests.support.servers import ServerProcess


@pytest.fixture(scope="module")
def stack(simulator: ServerProcess, redis_server: ServerProcess,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    made = Stack(simulator, redis_server, tmp_path_factory.mktemp("costs") / "keys.json")
    made.flush()
    made.start()
    yield made
    made.stop()


@pytest.fixture
def fresh(stack: Stack) -> Iterator[Stack]:
    """The stack, healthy when the case starts; restarted after it when the case left the
    proxy stalled or dead (a bug case keeps working after its client gave up)."""
    if not stack.healthy():
        stack.restart()
    yield stack
    if not stack.healthy(within=2.0):
        stack.restart()
