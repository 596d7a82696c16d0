"""`responses-proxy worker`: a process that runs background jobs and nothing else.

It builds the same `Runtime` as `serve` (fleet, store, event-log writer, worker) without the
HTTP side, and stops gracefully on SIGTERM or SIGINT (`Worker.stop`: stop taking jobs, let
running ones finish within `--shutdown-grace`, fail the rest, hand back what never started).
"""

from __future__ import annotations

import asyncio
import logging
import signal

from proxy.runtime import Runtime
from proxy.settings import Settings
from proxy.telemetry.tracing import Tracing

log = logging.getLogger("proxy.process.worker")


def run_worker(settings: Settings) -> None:
    asyncio.run(_main(settings))


async def _main(settings: Settings) -> None:
    tracing = Tracing.open(settings.server.otlp_endpoint)  # None: off (proxy/telemetry/tracing.py)
    runtime = await Runtime.open(settings, worker=True, tracing=tracing)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await runtime.start()
    log.info("worker running; SIGTERM stops it gracefully")
    try:
        await stop.wait()
        log.info("stopping: running jobs get %.0fs to finish", settings.server.shutdown_grace)
    finally:
        await runtime.aclose()
        if tracing is not None:  # the last spans, bounded; the exporter blocks: a thread
            await asyncio.to_thread(tracing.shutdown)
