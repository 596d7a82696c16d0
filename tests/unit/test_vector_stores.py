"""Vector stores' and file_search's pure parts: chunking by tokens with
overlap, attribute filters, exact cosine search, the file_search tool's options and result,
citations of files, the simulator's file search."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.filesearch import searched
from proxy.core.hosted import FILE_SEARCH
from proxy.core.request.tools import parse_tools
from proxy.core.tools.citations import cite
from proxy.core.vectors.chunking import chunk_text, word_tokens
from proxy.core.vectors.filters import matches, parse_filters
from proxy.core.vectors.search import Corpus, FileMeta, Hit, search
from proxy.core.vectors.stores import parse_chunking
from proxy.simulator.answer import script, tools
from proxy.simulator.config import SimConfig
from proxy.simulator.request import parse_chat


# -- chunking ----------------------------------------------------------------------------------
def test_chunks_hold_at_most_the_tokens_and_overlap_their_neighbours() -> None:
    words = [f"w{i:03d}" for i in range(1000)]  # one token each
    chunks = chunk_text(" ".join(words), max_tokens=100, overlap=40)
    assert all(len(c.split()) <= 100 for c in chunks)
    for before, after in itertools.pairwise(chunks):
        assert before.split()[-40:] == after.split()[:40]
    assert chunks[0].split()[0] == "w000" and chunks[-1].split()[-1] == "w999"
    assert chunk_text("   ") == []
    # A long word is several tokens; a word is never split, even one over the bound.
    assert word_tokens("abcdefghi") == 3
    assert chunk_text("x" * 1000, max_tokens=100, overlap=0) == ["x" * 1000]


def test_the_chunking_strategy_is_checked() -> None:
    assert parse_chunking({"type": "static", "static": {"max_chunk_size_tokens": 200,
                                                         "chunk_overlap_tokens": 100}}
                          ).max_tokens == 200
    with pytest.raises(InvalidRequest) as info:
        parse_chunking({"type": "static", "static": {"max_chunk_size_tokens": 200,
                                                      "chunk_overlap_tokens": 150}})
    assert info.value.param == "chunking_strategy.static.chunk_overlap_tokens"


# -- filters -----------------------------------------------------------------------------------
ATTRS = {"kind": "faq", "year": 2024, "public": True}


@pytest.mark.parametrize(("node", "expected"), [
    ({"type": "eq", "key": "kind", "value": "faq"}, True),
    ({"type": "ne", "key": "kind", "value": "faq"}, False),
    ({"type": "gte", "key": "year", "value": 2024}, True),
    ({"type": "lt", "key": "year", "value": 2024}, False),
    ({"type": "gt", "key": "kind", "value": 1}, False),  # a string is not ordered with a number
    ({"type": "eq", "key": "public", "value": 1}, False),  # a boolean is not a number
    ({"type": "in", "key": "kind", "value": ["faq", "manual"]}, True),
    ({"type": "nin", "key": "kind", "value": ["faq"]}, False),
    ({"type": "eq", "key": "missing", "value": "x"}, False),
    ({"type": "ne", "key": "missing", "value": "x"}, True),
    ({"type": "and", "filters": [{"type": "eq", "key": "public", "value": True},
                                 {"type": "gt", "key": "year", "value": 2000}]}, True),
    ({"type": "or", "filters": [{"type": "eq", "key": "kind", "value": "x"},
                                {"type": "and", "filters": [
                                    {"type": "lte", "key": "year", "value": 2024}]}]}, True),
])
def test_filters_match_attributes(node: dict[str, Any], expected: bool) -> None:
    assert matches(parse_filters(node, "filters"), ATTRS) is expected


@pytest.mark.parametrize(("node", "param"), [
    ({"type": "near", "key": "k", "value": 1}, "filters.type"),
    ({"type": "eq", "value": 1}, "filters.key"),
    ({"type": "eq", "key": "k", "value": {"a": 1}}, "filters.value"),
    ({"type": "and", "filters": [{"type": "in", "key": "k", "value": "x"}]},
     "filters.filters[0].value"),
])
def test_bad_filters_name_the_field(node: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_filters(node, "filters")
    assert info.value.param == param


# -- search ------------------------------------------------------------------------------------
def corpus() -> Corpus:
    a = FileMeta("file-a", "a.txt", {"kind": "a"})
    b = FileMeta("file-b", "b.txt", {"kind": "b"})
    return Corpus.build([
        (a, np.array([[1, 0, 0], [0.6, 0.8, 0]], np.float32), ["a one", "a two"]),
        (b, np.array([[0, 1, 0], [0, 0, 1]], np.float32), ["b one", "b two"])])


def test_search_ranks_by_cosine_with_filters_and_a_threshold() -> None:
    query = np.array([2.0, 0.1, 0.0], np.float32)  # not unit: normalised here
    hits = search(corpus(), query, limit=3)
    assert [h.text for h in hits] == ["a one", "a two", "b one"]
    assert hits[0].score == pytest.approx(1.0, abs=0.01) and hits[0].score <= 1.0
    kept = search(corpus(), query, limit=3, filters={"type": "eq", "key": "kind", "value": "b"})
    assert [h.file.file_id for h in kept] == ["file-b", "file-b"]
    assert [h.text for h in search(corpus(), query, limit=3, threshold=0.6)] == ["a one",
                                                                                 "a two"]
    # A query of another dimension (an embedding model changed) finds nothing, never raises.
    assert search(corpus(), np.ones(5, np.float32), limit=3) == []


# -- the tool ----------------------------------------------------------------------------------
def test_the_file_search_tool_is_parsed_and_echoed() -> None:
    parsed = parse_tools([{"type": "file_search", "vector_store_ids": ["vs_1"],
                           "filters": {"type": "eq", "key": "k", "value": "v"},
                           "ranking_options": {"score_threshold": 0.5}}],
                         drop_hosted=True, max_tools=8, run_hosted=FILE_SEARCH.tool_types)
    assert parsed.hosted == ("file_search",)
    assert parsed.tools == [parsed.hosted_options["file_search"]]
    assert parsed.tools[0]["max_num_results"] == 10
    assert parsed.tools[0]["ranking_options"] == {"ranker": "auto", "score_threshold": 0.5}
    with pytest.raises(InvalidRequest) as info:
        parse_tools([{"type": "file_search", "vector_store_ids": []}], drop_hosted=True,
                    max_tools=8, run_hosted=FILE_SEARCH.tool_types)
    assert info.value.param == "tools[0].vector_store_ids"
    # Not run (no --embedding-model): dropped as before.
    assert parse_tools([{"type": "file_search", "vector_store_ids": ["vs_1"]}],
                       drop_hosted=True, max_tools=8).dropped == ("file_search",)


HITS = [Hit(FileMeta("file-a", "a.pdf", {}), 0.9, "Valves open at 42 bar. They close later."),
        Hit(FileMeta("file-b", "b.md", {}), 0.5, "Lisbon has a river.")]


def test_results_show_only_with_the_include_and_cite_files_by_index() -> None:
    plain = searched("valves", HITS, 3, include=False)
    assert plain.fields == {"queries": ["valves"], "results": None}
    assert "[3] a.pdf\nFile: file-a\nValves open at 42 bar." in plain.output
    shown = searched("valves", HITS, 1, include=True).fields["results"]
    assert [r["file_id"] for r in shown] == ["file-a", "file-b"]
    answer = '"Valves open at 42 bar." [3] More.'
    assert cite(answer, plain.sources) == [{"type": "file_citation", "file_id": "file-a",
                                            "filename": "a.pdf",
                                            "index": answer.index("[3]") + 3}]
    # An answer that neither numbers nor quotes still cites the best passage, at its end.
    text = "I believe it is about forty bar."
    assert cite(text, plain.sources) == [{"type": "file_citation", "file_id": "file-a",
                                          "filename": "a.pdf", "index": len(text)}]


# -- the simulator -----------------------------------------------------------------------------
TOOL = {"type": "function", "function": {"name": "file_search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}}}}


def test_the_simulator_searches_files_and_quotes_the_first_passage() -> None:
    config = SimConfig()
    asked = parse_chat({"model": "sim-model", "tools": [TOOL], "messages": [
        {"role": "user", "content": "When do valves open?"}]}, config)
    (call,) = tools.choose_calls(asked)
    assert (call.name, call.arguments) == ("file_search", '{"query": "When do valves open?"}')
    answered = parse_chat({"model": "sim-model", "tools": [TOOL], "messages": [
        {"role": "user", "content": "When do valves open?"},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "c1", "type": "function",
            "function": {"name": "file_search", "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": "c1",
         "content": searched("valves", HITS, 1, include=False).output}]}, config)
    assert tools.choose_calls(answered) == []
    assert script.answer_text(answered) == '"Valves open at 42 bar." [1]'


def test_a_file_search_call_is_taken_back_as_history() -> None:
    """A stateless client replays its output, file_search_call included (lists kept)."""
    from proxy.core.ids import counter_ids
    from proxy.core.request.items import parse_input

    sent = {"type": "file_search_call", "id": "fs_1", "status": "completed",
            "queries": ["valves"], "results": [{"file_id": "file-a", "text": "t"}]}
    (item,) = parse_input([sent], counter_ids(), max_items=10)
    assert item == sent
