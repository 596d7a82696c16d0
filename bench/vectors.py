"""`python -m bench.vectors` (run by `make bench`): vector stores' ingestion and search.

Servers: one redis-server, the simulator (the fleet and the embedding model: its deterministic
trigram vectors, 256 dimensions) and one proxy with its worker (`--embedding-model sim-model`).

Rows:
- ingestion: a PDF of `--pages` pages (~330 words each) uploaded, added to a store, polled
  until `completed` (100 ms polls): pages per second, end to end (text extraction, chunking,
  embedding by the simulator, the write), one file on one worker;
- search over HTTP: `vector_stores.search` of that store through the proxy (one embedding call
  to the simulator per query, the store's vectors cached in the process): p50/p99;
- search at 10^4 and 10^5 chunks: vectors written directly into Redis (store/objects/vectors.py,
1000
  chunks per file, random unit vectors of 256 dimensions), searched in this process by the
  proxy's own `Searcher` with a fixed query vector (no embedding call): a warm search (one HGET
  of the store's version, the matrix product, the top 10) p50/p99, and a cold one (the store
  loaded from Redis and assembled first, as after a change) p50.

Bounded: `--searches` per row (default 200) and at most `--max-seconds` per row; the ingestion
waits at most 120 s. The machine is shared: compare within one run.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence

import numpy as np
import openai
from redis.asyncio import Redis

from bench.options import module_parser
from bench.procs import Service, free_port
from bench.stack import HOST, http_ok, redis_and_simulator
from proxy.core.vectors.stores import Chunking, file_record, store_record
from proxy.services.vectors.search import Searcher
from proxy.store.objects.vectors import RedisVectorStores, StoredChunks
from tests.support.documents import pdf_with_pages

DIM = 256
PER_FILE = 1000
WORDS = ["valve", "pressure", "maintenance", "schedule", "turbine", "inspection", "report",
         "crew", "safety", "engine", "coolant", "filter", "replacement", "spring", "autumn",
         "manual", "section", "figure", "table"]


def pdf_pages(pages: int, words: int = 330) -> bytes:
    """A PDF of `pages` pages, each a text layer of `words` words in lines of eleven."""
    rng = np.random.default_rng(7)
    texts = []
    for page in range(pages):
        chosen = [WORDS[i] for i in rng.integers(0, len(WORDS), words)]
        texts.append([f"Page {page + 1}"] + [" ".join(chosen[i:i + 11]) + "."
                                             for i in range(0, words, 11)])
    return pdf_with_pages(texts)


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered):7.2f} ms  p99 {p99:7.2f} ms  (n={len(ordered)})"


def ingest(port: int, pages: int) -> tuple[float, str]:
    client = openai.OpenAI(base_url=f"http://{HOST}:{port}/v1", api_key="sk-bench",
                           max_retries=0, timeout=120)
    pdf = client.files.create(file=("bench.pdf", pdf_pages(pages), "application/pdf"),
                              purpose="assistants")
    store = client.vector_stores.create(name="bench")
    started = time.perf_counter()
    done = client.vector_stores.files.create_and_poll(file_id=pdf.id, vector_store_id=store.id,
                                                      poll_interval_ms=100)
    elapsed = time.perf_counter() - started
    if done.status != "completed":
        raise RuntimeError(f"ingestion {done.status}: {done.last_error}")
    return elapsed, store.id


async def timed(count: int, max_seconds: float,
                call: Callable[[int], Awaitable[object]]) -> list[float]:
    """Milliseconds of `call(n)` for n < count, one at a time, for at most `max_seconds`."""
    out: list[float] = []
    deadline = time.monotonic() + max_seconds
    for n in range(count):
        if time.monotonic() > deadline:
            break
        started = time.perf_counter()
        await call(n)
        out.append((time.perf_counter() - started) * 1000)
    return out


async def http_search(port: int, store: str, count: int, max_seconds: float) -> list[float]:
    async with openai.AsyncOpenAI(base_url=f"http://{HOST}:{port}/v1", api_key="sk-bench",
                                  max_retries=0) as client:
        await client.vector_stores.search(store, query="warm up")
        return await timed(count, max_seconds, lambda n: client.vector_stores.search(
            store, query=f"turbine inspection schedule {n}"))


class _FixedQuery:
    """The Searcher's embedder, answering one random unit vector (no fleet)."""

    model = "bench"

    def __init__(self) -> None:
        vector = np.random.default_rng(1).standard_normal(DIM).astype(np.float32)
        self._vector = vector / np.linalg.norm(vector)

    async def embed(self, texts: list[str], account: object = None) -> np.ndarray:
        return np.stack([self._vector] * len(texts))


async def write_store(stores: RedisVectorStores, tenant: str, chunks: int) -> str:
    now = int(time.time())
    record = store_record(f"vs_bench{chunks}", now, "bench", None, None, now + 3600)
    await stores.create(tenant, record, 3600)
    rng = np.random.default_rng(chunks)
    text = "lorem ipsum " * 60  # ~ a chunk's text
    for start in range(0, chunks, PER_FILE):
        file = file_record(f"file-bench{start}", record["id"], now, {"n": start}, Chunking())
        await stores.add_files(tenant, record["id"], [file], ttl=3600, max_files=10_000)
        vectors = rng.standard_normal((PER_FILE, DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        done = {**file, "status": "completed"}
        await stores.finish_file(tenant, done, StoredChunks(
            {"file_id": file["id"], "filename": "bench.txt", "attributes": {"n": start}},
            vectors.tobytes(), DIM, [text] * PER_FILE), began=file, ttl=3600,
            max_chunks=1_000_000)
    return str(record["id"])


def searcher(stores: RedisVectorStores) -> Searcher:
    return Searcher(stores, _FixedQuery(), cache_bytes=1 << 30)  # type: ignore[arg-type]


async def search_row(stores: RedisVectorStores, chunks: int, count: int,
                     max_seconds: float) -> None:
    store = await write_store(stores, "bench", chunks)
    # A new Searcher each time: nothing cached, the store loaded and assembled first.
    cold = await timed(3, max_seconds,
                       lambda _: searcher(stores).search("bench", [store], "q", limit=10))
    warm_searcher = searcher(stores)
    assert len(await warm_searcher.search("bench", [store], "q", limit=10)) == 10
    warm = await timed(count, max_seconds,
                       lambda _: warm_searcher.search("bench", [store], "q", limit=10))
    megabytes = chunks * DIM * 4 / 2**20
    print(f"search {chunks:>7,} chunks x {DIM} dims ({megabytes:.0f} MiB of vectors): "
          f"warm {summary(warm)}; cold (load + assemble) p50 {statistics.median(cold):.0f} ms")


async def search_rows(redis_port: int, count: int, max_seconds: float) -> None:
    client = Redis(host=HOST, port=redis_port)
    try:
        for chunks in (10_000, 100_000):
            await search_row(RedisVectorStores(client), chunks, count, max_seconds)
    finally:
        await client.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench.vectors", __doc__)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--max-seconds", type=float, default=20.0)
    options = parser.parse_args(argv)
    services: list[Service] = []
    try:
        base = redis_and_simulator("bench-vectors-", services)
        if base is None:
            return 1
        port = free_port()
        services.append(Service("proxy", [
            sys.executable, "-m", "proxy", "serve", "--host", HOST, "--port", str(port),
            "--upstream", f"http://{HOST}:{base.sim_port}", "--embedding-model", "sim-model",
            "--redis-url", f"redis://{HOST}:{base.redis_port}/0"], base.logs / "proxy.log",
            env=base.env).start(lambda: http_ok(port, "/readyz")))
        print(f"bench.vectors: {options.searches} searches per row at most, "
              f"{options.max_seconds:.0f} s per row at most; shared machine: compare within "
              "one run")
        seconds, store = ingest(port, options.pages)
        print(f"ingestion: {options.pages} PDF pages in {seconds:.2f} s = "
              f"{options.pages / seconds:.1f} pages/s (extract, chunk 800/400, embed, store)")
        over_http = asyncio.run(http_search(port, store, options.searches,
                                            options.max_seconds))
        print(f"search over HTTP (the ingested store, an embedding call each): "
              f"{summary(over_http)}")
        asyncio.run(search_rows(base.redis_port, options.searches, options.max_seconds))
    finally:
        for service in reversed(services):
            service.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
