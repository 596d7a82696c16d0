"""`python -m bench.vectors` (run by `make bench`): vector stores' ingestion and search.

Servers: one redis-server, the simulator (the fleet and the embedding model: its deterministic
trigram vectors, 256 dimensions) and one proxy with its worker (`--embedding-model sim-model`).

Rows:
- ingestion: a PDF of `--pages` pages (~330 words each) uploaded, added to a store, polled
  until `completed` (100 ms polls): pages per second, end to end (text extraction, chunking,
  embedding by the simulator, the write), one file on one worker;
- search over HTTP: `vector_stores.search` of that store through the proxy (one embedding call
  to the simulator per query, the store's vectors cached in the process): p50/p99;
- search at 10^4 and 10^5 chunks: vectors written directly into Redis (store/vectors.py, 1000
  chunks per file, random unit vectors of 256 dimensions), searched in this process by the
  proxy's own `Searcher` with a fixed query vector (no embedding call): a warm search (one HGET
  of the store's version, the matrix product, the top 10) p50/p99, and a cold one (the store
  loaded from Redis and assembled first, as after a change) p50.

Bounded: `--searches` per row (default 200) and at most `--max-seconds` per row; the ingestion
waits at most 120 s. The machine is shared: compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import openai
from redis.asyncio import Redis

from bench.procs import Service, free_port
from bench.stack import HOST, http_ok, redis_ok
from proxy.core.vectorstores import Chunking, file_record, store_record
from proxy.services.vectors.search import Searcher
from proxy.store.vectors import RedisVectorStores, StoredChunks

DIM = 256
PER_FILE = 1000
WORDS = ["valve", "pressure", "maintenance", "schedule", "turbine", "inspection", "report",
         "crew", "safety", "engine", "coolant", "filter", "replacement", "spring", "autumn",
         "manual", "section", "figure", "table"]


def pdf_pages(pages: int, words: int = 330) -> bytes:
    """A PDF of `pages` pages, each a text layer of `words` words in lines of eleven."""
    rng = np.random.default_rng(7)
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    font = 3 + 2 * pages  # after the catalog, the page tree and each page's two objects
    for page in range(pages):
        chosen = [WORDS[i] for i in rng.integers(0, len(WORDS), words)]
        lines = [" ".join(chosen[i:i + 11]) for i in range(0, words, 11)]
        text = " ".join(f"({line}.) Tj T*" for line in lines)
        stream = f"BT /F1 10 Tf 12 TL 40 760 Td (Page {page + 1}) Tj T* {text} ET".encode()
        content = len(objects) + 1
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        kids.append(len(objects) + 1)
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents "
                       b"%d 0 R /Resources << /Font << /F1 %d 0 R >> >> >>" % (content, font))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids), pages)
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)


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


def http_search(port: int, store: str, count: int, max_seconds: float) -> list[float]:
    client = openai.OpenAI(base_url=f"http://{HOST}:{port}/v1", api_key="sk-bench",
                           max_retries=0)
    client.vector_stores.search(store, query="warm up")
    out: list[float] = []
    deadline = time.monotonic() + max_seconds
    for n in range(count):
        if time.monotonic() > deadline:
            break
        started = time.perf_counter()
        client.vector_stores.search(store, query=f"turbine inspection schedule {n}")
        out.append((time.perf_counter() - started) * 1000)
    return out


class _FixedQuery:
    """The Searcher's embedder, answering one random unit vector (no fleet)."""

    model = "bench"

    def __init__(self) -> None:
        vector = np.random.default_rng(1).standard_normal(DIM).astype(np.float32)
        self._vector = vector / np.linalg.norm(vector)

    async def embed(self, texts: list[str]) -> np.ndarray:
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


async def search_rows(redis_port: int, count: int, max_seconds: float) -> None:
    client = Redis(host=HOST, port=redis_port)
    stores = RedisVectorStores(client)
    try:
        for chunks in (10_000, 100_000):
            store = await write_store(stores, "bench", chunks)
            searcher = Searcher(stores, _FixedQuery(), cache_bytes=1 << 30)  # type: ignore[arg-type]
            cold: list[float] = []
            for _ in range(3):
                fresh = Searcher(stores, _FixedQuery(), cache_bytes=1 << 30)  # type: ignore[arg-type]
                started = time.perf_counter()
                await fresh.search("bench", [store], "q", limit=10)
                cold.append((time.perf_counter() - started) * 1000)
            await searcher.search("bench", [store], "q", limit=10)
            warm: list[float] = []
            deadline = time.monotonic() + max_seconds
            for _ in range(count):
                if time.monotonic() > deadline:
                    break
                started = time.perf_counter()
                hits = await searcher.search("bench", [store], "q", limit=10)
                warm.append((time.perf_counter() - started) * 1000)
            assert len(hits) == 10
            megabytes = chunks * DIM * 4 / 2**20
            print(f"search {chunks:>7,} chunks x {DIM} dims ({megabytes:.0f} MiB of vectors): "
                  f"warm {summary(warm)}; cold (load + assemble) p50 "
                  f"{statistics.median(cold):.0f} ms")
    finally:
        await client.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.vectors", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--max-seconds", type=float, default=20.0)
    options = parser.parse_args(argv)
    redis_exe = shutil.which("redis-server")
    if redis_exe is None:
        print("redis-server is not installed", file=sys.stderr)
        return 1
    logs = Path(tempfile.mkdtemp(prefix="bench-vectors-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    redis_port, sim_port, port = free_port(), free_port(), free_port()
    services: list[Service] = []
    try:
        redis = Service("redis", [redis_exe, "--bind", HOST, "--port", str(redis_port),
                                  "--save", "", "--appendonly", "no", "--dir", str(logs)],
                        logs / "redis.log", env=env)
        services.append(redis.start(lambda: redis_ok(redis_port)))
        sim = Service("simulator", [sys.executable, "-m", "proxy", "simulate", "--host", HOST,
                                    "--port", str(sim_port)], logs / "sim.log", env=env)
        services.append(sim.start(lambda: http_ok(sim_port, "/health")))
        proxy = Service("proxy", [
            sys.executable, "-m", "proxy", "serve", "--host", HOST, "--port", str(port),
            "--upstream", f"http://{HOST}:{sim_port}", "--embedding-model", "sim-model",
            "--redis-url", f"redis://{HOST}:{redis_port}/0"], logs / "proxy.log", env=env)
        services.append(proxy.start(lambda: http_ok(port, "/readyz")))
        print(f"bench.vectors: {options.searches} searches per row at most, "
              f"{options.max_seconds:.0f} s per row at most; shared machine: compare within "
              "one run")
        seconds, store = ingest(port, options.pages)
        print(f"ingestion: {options.pages} PDF pages in {seconds:.2f} s = "
              f"{options.pages / seconds:.1f} pages/s (extract, chunk 800/400, embed, store)")
        print(f"search over HTTP (the ingested store, an embedding call each): "
              f"{summary(http_search(port, store, options.searches, options.max_seconds))}")
        asyncio.run(search_rows(redis_port, options.searches, options.max_seconds))
    finally:
        for service in reversed(services):
            service.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
