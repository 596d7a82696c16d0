"""The memory a process's ingestions may hold at once (`--ingest-memory-budget`).

One ingestion holds a small multiple of its file (services/vectors/ingest.py: the text, its
chunks, the stored form of both, the vectors), so a worker running several 32 MiB files at once
would pass a 1 GiB pod. Each ingestion reserves `INGEST_MULTIPLE` times its file's size before
it reads a byte, and waits while the reservations of those running would pass the budget. A
file whose reservation alone passes it runs when nothing else holds any (it is bounded by
--max-file-bytes), so no file waits for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

# Peak bytes one ingestion holds per byte of its file, measured (docs/SECURITY.md "Cost
# bounds": tracemalloc peak / file size for 8 and 32 MiB text files, rounded up).
INGEST_MULTIPLE = 8


class MemoryBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiting: list[asyncio.Future[None]] = []

    def reservation(self, file_bytes: int) -> int:
        return min(self.limit, INGEST_MULTIPLE * file_bytes)

    @contextlib.asynccontextmanager
    async def held(self, file_bytes: int) -> AsyncIterator[None]:
        size = self.reservation(file_bytes)
        while self.used + size > self.limit:
            woken = asyncio.get_running_loop().create_future()
            self._waiting.append(woken)
            try:
                await woken
            finally:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(woken)
        self.used += size
        try:
            yield
        finally:
            # Released without awaiting: a cancelled ingestion still gives its share back.
            self.used -= size
            for woken in self._waiting:
                if not woken.done():
                    woken.set_result(None)
