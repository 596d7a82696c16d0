"""services/process/offload.py: a large body's step runs in a worker thread, a small one's on
the loop, unchanged (a thread hop is not added to the small-request path)."""

from __future__ import annotations

import threading

from proxy.services.process import offload


def _thread() -> int:
    return threading.get_ident()


async def test_a_large_bodys_step_leaves_the_loop_a_small_ones_does_not() -> None:
    loop_thread = threading.get_ident()
    assert await offload.run(offload.OFFLOAD_BYTES, _thread) == loop_thread
    assert await offload.run(offload.OFFLOAD_BYTES + 1, _thread) != loop_thread


async def test_arguments_and_errors_pass_through() -> None:
    def step(a: int, *, b: int) -> int:
        if b < 0:
            raise ValueError(b)
        return a + b

    for size in (0, 2 * offload.OFFLOAD_BYTES):
        assert await offload.run(size, step, 1, b=2) == 3
        try:
            await offload.run(size, step, 1, b=-1)
        except ValueError as exc:
            assert exc.args == (-1,)
        else:
            raise AssertionError("the step's error was lost")
