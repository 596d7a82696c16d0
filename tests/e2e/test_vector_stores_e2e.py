"""Vector stores and the file_search tool through the official SDK:
two real proxy processes on one redis-server (A serves HTTP only, B runs the worker: every file
is ingested by the other instance), the simulator as the fleet and as the embedding model
(`--embedding-model sim-model`, its deterministic trigram vectors), and one embedded-store
process that ingests its own files (`make run`). Every streamed event is validated against the
SDK's types (check_stream)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types import VectorStore
from openai.types.responses import Response
from openai.types.vector_stores import VectorStoreFile

from tests.support import servers
from tests.support.conformance import check_stream
from tests.support.documents import pdf_sharing_one_stream, pdf_with_text
from tests.support.servers import ServerProcess, start_proxy

pytestmark = pytest.mark.e2e

KEY_A = "sk-vectors-a"
KEY_B = "sk-vectors-b"
MODEL = "sim-model"
VALVE = "The Zephyr valve opens at 42 bar of pressure. It is serviced every spring by the crew."
FAQ = ("Our office is in Lisbon near the river. The cafeteria opens at noon on weekdays. "
       "Parking is free for visitors.")
QUESTION = "At what pressure does the Zephyr valve open?"
FLAGS = ("--api-key", KEY_A, "--api-key", KEY_B, "--embedding-model", MODEL)


@pytest.fixture(scope="module")
def pair(simulator: ServerProcess,
         redis_server: ServerProcess) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    url = f"redis://127.0.0.1:{redis_server.port}/9"
    a = start_proxy(simulator.url, *FLAGS, "--no-worker", redis_url=url)
    b = start_proxy(simulator.url, *FLAGS, "--heartbeat-interval", "0.5", redis_url=url)
    yield a, b
    a.stop()
    b.stop()


def sdk(server: ServerProcess, key: str = KEY_A) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


@pytest.fixture(scope="module")
def built(pair: tuple[ServerProcess, ServerProcess]) -> dict[str, Any]:
    """A store of the key A built through A (ingested by B's worker): a PDF and a Markdown
    file, each with attributes."""
    client = sdk(pair[0])
    pdf = client.files.create(file=("valve.pdf", pdf_with_text(VALVE), "application/pdf"),
                              purpose="assistants")
    faq = client.files.create(file=("faq.md", FAQ.encode(), "text/markdown"),
                              purpose="assistants")
    store = client.vector_stores.create(name="manuals", file_ids=[pdf.id],
                                        expires_after={"anchor": "last_active_at", "days": 2})
    VectorStore.model_validate(store.model_dump(), strict=True)
    assert store.name == "manuals" and store.file_counts.total == 1
    batch = client.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id, files=[
            {"file_id": pdf.id, "attributes": {"kind": "manual", "year": 2023}},
            {"file_id": faq.id, "attributes": {"kind": "faq", "year": 2025}}],
        poll_interval_ms=100)
    assert batch.status == "completed", batch
    assert batch.file_counts.completed == 2 and batch.file_counts.failed == 0
    return {"store": store.id, "pdf": pdf.id, "faq": faq.id, "batch": batch.id}


# -- vector stores -----------------------------------------------------------------------------
def test_a_store_is_built_from_a_pdf_and_listed(pair: tuple[ServerProcess, ServerProcess],
                                               built: dict[str, Any]) -> None:
    client = sdk(pair[0])
    store = client.vector_stores.retrieve(built["store"])
    VectorStore.model_validate(store.model_dump(), strict=True)
    assert store.status == "completed"
    assert store.file_counts.completed == 2 and store.file_counts.total == 2
    assert store.usage_bytes > 0
    assert store.expires_after is not None and store.expires_after.days == 2
    assert store.expires_at is not None and store.expires_at > store.created_at
    files = client.vector_stores.files.list(built["store"]).data
    assert sorted(f.id for f in files) == sorted([built["pdf"], built["faq"]])
    for file in files:
        VectorStoreFile.model_validate(file.model_dump(), strict=True)
        assert file.status == "completed" and file.last_error is None
    assert client.vector_stores.files.retrieve(
        built["pdf"], vector_store_id=built["store"]).attributes == {"kind": "manual",
                                                                     "year": 2023}
    in_batch = client.vector_stores.file_batches.list_files(built["batch"],
                                                            vector_store_id=built["store"])
    assert len(in_batch.data) == 2
    assert built["store"] in [s.id for s in client.vector_stores.list().data]
    renamed = client.vector_stores.update(built["store"], name="handbooks")
    assert renamed.name == "handbooks" and renamed.file_counts.completed == 2


def test_search_ranks_filters_and_thresholds(pair: tuple[ServerProcess, ServerProcess],
                                             built: dict[str, Any]) -> None:
    client = sdk(pair[0])
    found = client.vector_stores.search(built["store"], query=QUESTION).data
    assert found and found[0].file_id == built["pdf"]
    assert found[0].filename == "valve.pdf"
    assert "42 bar" in found[0].content[0].text
    assert 0.0 < found[0].score <= 1.0
    assert found[0].attributes == {"kind": "manual", "year": 2023}
    # An attribute filter keeps the other file only; a compound one both, or none.
    faq_only = client.vector_stores.search(built["store"], query=QUESTION, filters={
        "type": "eq", "key": "kind", "value": "faq"}).data
    assert [r.file_id for r in faq_only] == [built["faq"]]
    recent = client.vector_stores.search(built["store"], query=QUESTION, filters={
        "type": "and", "filters": [{"type": "gte", "key": "year", "value": 2024},
                                   {"type": "in", "key": "kind", "value": ["faq", "x"]}]}).data
    assert [r.file_id for r in recent] == [built["faq"]]
    assert not client.vector_stores.search(built["store"], query=QUESTION, filters={
        "type": "or", "filters": [{"type": "lt", "key": "year", "value": 2000},
                                  {"type": "eq", "key": "missing", "value": "x"}]}).data
    # The threshold drops what scores below it.
    best = found[0].score
    above = client.vector_stores.search(built["store"], query=QUESTION,
                                        ranking_options={"score_threshold": best - 1e-6}).data
    assert [r.file_id for r in above] == [built["pdf"]]
    assert not client.vector_stores.search(built["store"], query=QUESTION,
                                           ranking_options={"score_threshold": 0.999}).data
    with pytest.raises(openai.BadRequestError) as caught:
        client.vector_stores.search(built["store"], query=QUESTION,
                                    filters={"type": "near", "key": "k", "value": 1})
    assert caught.value.body["param"] == "filters.type"  # type: ignore[index]


def test_bad_files_fail_with_the_sdks_codes(pair: tuple[ServerProcess, ServerProcess]) -> None:
    client = sdk(pair[0])
    store = client.vector_stores.create(name="bad")
    png = client.files.create(file=("x.png", b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png"),
                              purpose="assistants")
    broken = client.files.create(file=("broken.pdf", b"%PDF-1.4\nnot really", "application/pdf"),
                                 purpose="assistants")
    codes = {}
    for file in (png, broken):
        done = client.vector_stores.files.create_and_poll(file_id=file.id,
                                                          vector_store_id=store.id,
                                                          poll_interval_ms=100)
        VectorStoreFile.model_validate(done.model_dump(), strict=True)
        assert done.status == "failed" and done.last_error is not None
        codes[file.filename] = done.last_error.code
    assert codes == {"x.png": "unsupported_file", "broken.pdf": "invalid_file"}
    assert client.vector_stores.retrieve(store.id).file_counts.failed == 2


def test_a_pdf_past_the_per_document_bounds_fails_as_invalid_file(
        pair: tuple[ServerProcess, ServerProcess]) -> None:
    # A hostile PDF: 3.3 KB, five pages sharing one stream of 200,000 operators (58 s of
    # the worker's CPU before); stopped at 250,000 operators in an extraction child.
    client = sdk(pair[0])
    store = client.vector_stores.create(name="hostile")
    hostile = client.files.create(file=("h.pdf", pdf_sharing_one_stream(200_000, 5),
                                        "application/pdf"), purpose="assistants")
    done = client.vector_stores.files.create_and_poll(file_id=hostile.id,
                                                      vector_store_id=store.id,
                                                      poll_interval_ms=100)
    assert done.status == "failed" and done.last_error is not None
    assert done.last_error.code == "invalid_file"
    assert "operators" in done.last_error.message


def test_another_keys_stores_and_files_are_unknown(pair: tuple[ServerProcess, ServerProcess],
                                                   built: dict[str, Any]) -> None:
    a, b = sdk(pair[0]), sdk(pair[0], KEY_B)
    for call in (lambda: b.vector_stores.retrieve(built["store"]),
                 lambda: b.vector_stores.search(built["store"], query=QUESTION),
                 lambda: b.vector_stores.files.list(built["store"]),
                 lambda: b.vector_stores.delete(built["store"]),
                 lambda: b.vector_stores.files.retrieve(built["pdf"],
                                                        vector_store_id=built["store"])):
        with pytest.raises(openai.NotFoundError):
            call()
    assert built["store"] not in [s.id for s in b.vector_stores.list().data]
    own = b.vector_stores.create(name="mine")
    with pytest.raises(openai.NotFoundError) as caught:  # A's file, into B's store
        b.vector_stores.files.create(vector_store_id=own.id, file_id=built["pdf"])
    assert caught.value.body["param"] == "file_id"  # type: ignore[index]
    # file_search over A's store for B: a 404 naming the tool's field, before the model runs
    # (tests/e2e/test_metering_e2e.py has every transport).
    with pytest.raises(openai.NotFoundError) as caught:
        b.responses.create(model=MODEL, input=QUESTION, tools=[
            {"type": "file_search", "vector_store_ids": [built["store"]]}],
            include=["file_search_call.results"])
    assert caught.value.body["param"] == "tools[0].vector_store_ids"  # type: ignore[index]
    assert "42 bar" not in str(caught.value.body)
    assert a.vector_stores.retrieve(built["store"]).file_counts.completed == 2


# -- file_search -------------------------------------------------------------------------------
def check_answer(response: Response, built: dict[str, Any], *, results: bool) -> None:
    """One search with the user's question, then an answer quoting the PDF and citing it."""
    assert response.status == "completed", response.error
    assert [item.type for item in response.output] == ["file_search_call", "message"]
    call, message = response.output
    assert call.type == "file_search_call" and call.id.startswith("fs_")
    assert call.status == "completed" and call.queries == [QUESTION]
    if results:
        assert call.results and call.results[0].file_id == built["pdf"]
        assert call.results[0].filename == "valve.pdf" and "42 bar" in (call.results[0].text or "")
    else:
        assert call.results is None
    assert message.type == "message"
    part = message.content[0]
    assert part.type == "output_text"
    assert "The Zephyr valve opens at 42 bar of pressure." in part.text
    citations = [a for a in part.annotations if a.type == "file_citation"]
    assert citations, part
    for citation in citations:
        assert citation.file_id in (built["pdf"], built["faq"])
        assert 0 <= citation.index <= len(part.text)
    assert citations[0].file_id == built["pdf"] and citations[0].filename == "valve.pdf"


def tools(built: dict[str, Any]) -> list[Any]:
    return [{"type": "file_search", "vector_store_ids": [built["store"]],
             "max_num_results": 3}]


def test_file_search_answers_with_citations(pair: tuple[ServerProcess, ServerProcess],
                                            built: dict[str, Any]) -> None:
    client = sdk(pair[0])
    plain = client.responses.create(model=MODEL, input=QUESTION, tools=tools(built))
    check_answer(plain, built, results=False)
    assert plain.tools[0].type == "file_search"
    assert plain.tools[0].vector_store_ids == [built["store"]]
    Response.model_validate(plain.model_dump(), strict=True)
    included = client.responses.create(model=MODEL, input=QUESTION, tools=tools(built),
                                       include=["file_search_call.results"])
    check_answer(included, built, results=True)


def test_file_search_streamed_every_event_valid(pair: tuple[ServerProcess, ServerProcess],
                                                built: dict[str, Any]) -> None:
    client = sdk(pair[0])
    events = [e.to_dict() for e in client.responses.create(
        model=MODEL, input=QUESTION, tools=tools(built), stream=True,
        include=["file_search_call.results"])]
    check_stream(events)
    kinds = [e["type"] for e in events]
    assert kinds.index("response.file_search_call.in_progress") < \
        kinds.index("response.file_search_call.searching") < \
        kinds.index("response.file_search_call.completed") < \
        kinds.index("response.output_text.delta") < \
        kinds.index("response.output_text.annotation.added") < \
        kinds.index("response.output_text.done")
    check_answer(Response.model_validate(events[-1]["response"]), built, results=True)
    # Replayed from its log, and from the other instance: the same events.
    replayed = [e.to_dict() for e in client.responses.retrieve(events[0]["response"]["id"],
                                                                stream=True)]
    assert replayed == events
    other = [e.to_dict() for e in sdk(pair[1]).responses.retrieve(
        events[0]["response"]["id"], stream=True)]
    assert other == events


def test_file_search_stored_and_rebuilt(pair: tuple[ServerProcess, ServerProcess],
                                        built: dict[str, Any]) -> None:
    client = sdk(pair[0])
    made = client.responses.create(model=MODEL, input=QUESTION, tools=tools(built))
    got = sdk(pair[1]).responses.retrieve(made.id)
    assert got.model_dump() == made.model_dump()
    rebuilt = [e.to_dict() for e in client.responses.retrieve(made.id, stream=True)]
    check_stream(rebuilt)
    kinds = [e["type"] for e in rebuilt]
    for kind in ("response.file_search_call.in_progress", "response.file_search_call.searching",
                 "response.file_search_call.completed", "response.output_text.annotation.added"):
        assert kind in kinds, kind


def test_file_search_in_the_background_on_the_other_instance(
        pair: tuple[ServerProcess, ServerProcess], built: dict[str, Any]) -> None:
    a, b = pair
    made = sdk(a).responses.create(model=MODEL, input=QUESTION, tools=tools(built),
                                   background=True, include=["file_search_call.results"])
    body = servers.wait_status(a, made.id, {"completed", "failed"}, 30,
                               headers={"authorization": f"Bearer {KEY_A}"})
    check_answer(Response.model_validate(body), built, results=True)
    events = [e.to_dict() for e in sdk(a).responses.retrieve(made.id, stream=True)]
    check_stream(events)
    assert events == [e.to_dict() for e in sdk(b).responses.retrieve(made.id, stream=True)]
    assert [e["type"] for e in events].count("response.file_search_call.searching") == 1


def test_one_process_on_its_embedded_store_ingests_and_searches(
        simulator: ServerProcess) -> None:
    """`make run`: no Redis, the process's own worker ingests."""
    server = start_proxy(simulator.url, "--embedding-model", MODEL)
    try:
        client = sdk(server, "sk-any")
        pdf = client.files.create(file=("valve.pdf", pdf_with_text(VALVE), "application/pdf"),
                                  purpose="assistants")
        store = client.vector_stores.create(name="solo")
        done = client.vector_stores.files.create_and_poll(file_id=pdf.id,
                                                          vector_store_id=store.id,
                                                          poll_interval_ms=100)
        assert done.status == "completed", done.last_error
        answer = client.responses.create(model=MODEL, input=QUESTION, tools=[
            {"type": "file_search", "vector_store_ids": [store.id]}])
        check_answer(answer, {"pdf": pdf.id, "faq": ""}, results=False)
        deleted = client.vector_stores.delete(store.id)
        assert deleted.deleted and deleted.object == "vector_store.deleted"
        with pytest.raises(openai.NotFoundError):
            client.vector_stores.retrieve(store.id)
    finally:
        server.stop()


def test_vectors_count_in_the_keys_storage_budget(simulator: ServerProcess) -> None:
    # One small file added to store after store: each store keeps its own vectors and texts
    # (about 1 KB of float32 per chunk at 256 dimensions), so without counting them a key could
    # fill the shared Redis from one file its budget admitted once.
    budget = 20_000
    server = start_proxy(simulator.url, "--embedding-model", MODEL,
                         "--max-stored-bytes-per-key", str(budget))
    try:
        client = sdk(server, "sk-any")
        text = client.files.create(file=("valve.txt", (VALVE + " ") * 20, "text/plain"),
                                   purpose="assistants")
        stores, last = [], None
        for _ in range(40):  # the budget is held well before: 20 KB over >= 2 KB per store
            store = client.vector_stores.create(name="copy")
            stores.append(store.id)
            last = client.vector_stores.files.create_and_poll(
                file_id=text.id, vector_store_id=store.id, poll_interval_ms=50)
            if last.status != "completed":
                break
        assert last is not None and last.status == "failed"
        assert last.last_error is not None and last.last_error.code == "server_error"
        assert "storage budget" in last.last_error.message
        assert 2 < len(stores) < 40
        for vs_id in stores:  # deleting the stores gives their bytes back
            client.vector_stores.delete(vs_id)
        again = client.vector_stores.create(name="again")
        done = client.vector_stores.files.create_and_poll(
            file_id=text.id, vector_store_id=again.id, poll_interval_ms=50)
        assert done.status == "completed", done.last_error
    finally:
        server.stop()
