"""web_search's pure parts: citations from an answer's text, the search
results' shape, a hosted call through the assembler (live, picked up from a log, rebuilt from
the final object), the simulator's search, the flag's check."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.events.assembler import Assembler
from proxy.core.events.replay import events_from_response
from proxy.core.hosted import WEB_SEARCH, Source
from proxy.core.ids import counter_ids
from proxy.core.tools.citations import cite
from proxy.core.websearch import WebResult, parse_results, search_failed, searched
from proxy.settings import ConfigError, build_settings
from proxy.simulator.answer import script, tools
from proxy.simulator.config import SimConfig
from proxy.simulator.request import parse_chat
from tests.support.assembly import CREATED_AT, base_response
from tests.support.conformance import check_stream

RESULTS = [WebResult("https://a.example/1", "Alpha page", "Alpha is the first letter. More."),
           WebResult("https://b.example/2", "Beta page", "Beta comes second. Then gamma.")]


def sources() -> tuple[Source, ...]:
    return searched("letters", RESULTS, 1).sources


# -- citations ---------------------------------------------------------------------------------
def test_markers_become_url_citations_spanning_them() -> None:
    text = "Alpha leads [1], beta follows [2]; both [1, 2]. Not [7] nor [x]."
    got = cite(text, sources())
    assert [(a["url"], text[a["start_index"]:a["end_index"]]) for a in got] == [
        ("https://a.example/1", "[1]"), ("https://b.example/2", "[2]"),
        ("https://a.example/1", "[1, 2]"), ("https://b.example/2", "[1, 2]")]
    assert got[0] == {"type": "url_citation", "url": "https://a.example/1",
                      "title": "Alpha page", "start_index": 12, "end_index": 15}


def test_an_answer_without_markers_cites_what_it_quotes() -> None:
    text = 'As the page says, "Beta comes second." Indeed.'
    (only,) = cite(text, sources())
    assert only["url"] == "https://b.example/2"
    assert text[only["start_index"]:only["end_index"]] == "Beta comes second."
    assert cite("nothing from the results here", sources()) == []
    assert cite("Alpha [1]", ()) == []


def test_numbering_goes_on_across_searches() -> None:
    second = searched("more", RESULTS, 3)
    assert [s.number for s in second.sources] == [3, 4]
    assert "[3] Alpha page" in second.output and "URL: https://a.example/1" in second.output
    assert second.fields["action"] == {
        "type": "search", "query": "more",
        "sources": [{"type": "url", "url": "https://a.example/1"},
                    {"type": "url", "url": "https://b.example/2"}]}


def test_results_are_bounded_and_checked() -> None:
    body = {"results": [{"url": "javascript:alert(1)", "title": "x"},
                        {"url": "https://ok.example/", "title": "  Ok \n title ",
                         "content": "c" * 5000},
                        "not an object",
                        {"url": "https://two.example/"},
                        {"url": "https://three.example/"}]}
    got = parse_results(body, 2)
    assert [r.url for r in got] == ["https://ok.example/", "https://two.example/"]
    assert got[0].title == "Ok title" and len(got[0].content) == 1500
    assert got[1].title == "https://two.example/"  # no title: its URL
    with pytest.raises(ValueError, match="results"):
        parse_results({"answers": []}, 5)
    with pytest.raises(ValueError, match="results"):
        parse_results([1, 2], 5)


# -- the assembler -----------------------------------------------------------------------------
def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


def call_chunks(arguments: str) -> list[dict[str, Any]]:
    return [chunk({"tool_calls": [{"index": 0, "id": "call_9", "type": "function",
                                   "function": {"name": "web_search", "arguments": ""}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
            chunk(finish="tool_calls")]


def searched_stream(result_ok: bool = True) -> list[dict[str, Any]]:
    """A response that searches (the loop's steps, by hand), then answers citing [1]."""
    assembler = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
    assembler.offer_hosted({"web_search": WEB_SEARCH})
    events = assembler.start()
    for c in call_chunks('{"query": "letters"}'):
        events += assembler.feed(c)
    assert assembler.waiting is not None and assembler.waiting["type"] == "web_search_call"
    assert assembler.waiting["call_id"] == "call_9"
    events += assembler.hosted_run()
    events += assembler.hosted_end(searched("letters", RESULTS, 1) if result_ok
                                   else search_failed("letters", "HTTP 500"))
    assembler.next_turn()
    for piece in ["Alpha is first", " [1]."]:
        events += assembler.feed(chunk({"content": piece}))
    events += assembler.feed(chunk(finish="stop"))
    events += assembler.end()
    return events


def test_a_hosted_call_streams_its_own_item_and_the_answer_cites() -> None:
    events = searched_stream()
    check_stream(events)
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" not in kinds  # the item has no arguments
    assert kinds[2:6] == ["response.output_item.added", "response.web_search_call.in_progress",
                          "response.web_search_call.searching",
                          "response.web_search_call.completed"]
    call, message = events[-1]["response"]["output"]
    assert call["id"].startswith("ws_") and call["status"] == "completed"
    assert call["action"]["query"] == "letters"
    assert events[2]["item"]["action"] == {"type": "search", "query": "letters"}
    (annotation,) = message["content"][0]["annotations"]
    assert (annotation["url"], annotation["start_index"], annotation["end_index"]) == (
        "https://a.example/1", 15, 18)
    added = next(e for e in events if e["type"] == "response.output_text.annotation.added")
    assert added["annotation"] == annotation and added["annotation_index"] == 0


def test_a_failed_search_ends_the_item_failed_and_the_answer_goes_on() -> None:
    events = searched_stream(result_ok=False)
    check_stream(events)
    call, message = events[-1]["response"]["output"]
    assert call["status"] == "failed" and call["action"]["query"] == "letters"
    assert message["content"][0]["annotations"] == []  # nothing found: nothing to cite


def test_replay_rebuilds_the_hosted_events() -> None:
    live = searched_stream()
    replayed = events_from_response(live[-1]["response"])
    check_stream(replayed)
    kinds = [e["type"] for e in replayed]
    for kind in ("response.web_search_call.in_progress", "response.web_search_call.searching",
                 "response.web_search_call.completed", "response.output_text.annotation.added"):
        assert kinds.count(kind) == 1, kind
    assert replayed[-1]["response"] == live[-1]["response"]


@pytest.mark.parametrize("ending", ["fail", "cancel"])
def test_every_prefix_picked_up_from_the_log_closes_valid(ending: str) -> None:
    live = searched_stream()
    for cut in range(2, len(live)):
        prefix = live[:cut]
        assembler = Assembler(base_response(), ids=counter_ids(), clock=lambda: CREATED_AT)
        assembler.restore(prefix)
        stream = prefix + (assembler.fail("stopped") if ending == "fail" else assembler.cancel())
        check_stream(stream)
        output = stream[-1]["response"]["output"]
        if output and output[0]["type"] == "web_search_call" and cut <= 5:
            assert output[0]["status"] == "incomplete"  # interrupted while it waited
            assert output[0]["action"]["query"] == "letters"


# -- the simulator -----------------------------------------------------------------------------
SEARCH_TOOL = {"type": "function", "function": {
    "name": "web_search", "description": WEB_SEARCH.description,
    "parameters": WEB_SEARCH.parameters}}


def test_the_simulator_searches_the_question_and_quotes_the_first_result() -> None:
    config = SimConfig()
    asked = parse_chat({"model": "sim-model", "tools": [SEARCH_TOOL], "messages": [
        {"role": "user", "content": "Who wrote Dune?"}]}, config)
    (call,) = tools.choose_calls(asked)
    assert (call.name, call.arguments) == ("web_search", '{"query": "Who wrote Dune?"}')
    steered = parse_chat({"model": "sim-model", "tools": [SEARCH_TOOL], "messages": [
        {"role": "user", "content": "dune query=herbert-dune"}]}, config)
    assert tools.choose_calls(steered)[0].arguments == '{"query": "herbert-dune"}'
    output = searched("Who wrote Dune?", RESULTS, 1).output
    answered = parse_chat({"model": "sim-model", "tools": [SEARCH_TOOL], "messages": [
        {"role": "user", "content": "Who wrote Dune?"},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "c1", "type": "function",
            "function": {"name": "web_search", "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": "c1", "content": output}]}, config)
    assert tools.choose_calls(answered) == []
    assert script.answer_text(answered) == '"Alpha is the first letter." [1]'
    # Another tool the text names wins; a plain function is no search tool.
    other = {"type": "function", "function": {"name": "get_time", "parameters": {}}}
    named = parse_chat({"model": "sim-model", "tools": [SEARCH_TOOL, other], "messages": [
        {"role": "user", "content": "please call get_time"}]}, config)
    assert [c.name for c in tools.choose_calls(named)] == ["get_time"]


# -- the flag ----------------------------------------------------------------------------------
def test_the_web_search_flag() -> None:
    settings = build_settings({"web_search": "http://127.0.0.1:8888/search"}, {})
    assert settings.web_search.url == "http://127.0.0.1:8888/search"
    assert (settings.web_search.timeout, settings.web_search.max_results) == (10.0, 5)
    assert build_settings({}, {"PROXY_WEB_SEARCH": "https://searx.example/search"}
                          ).web_search.url == "https://searx.example/search"
    for bad in ("ftp://x.example/", "searx:8888", "http://h.example/#frag"):
        with pytest.raises(ConfigError) as info:
            build_settings({"web_search": bad}, {})
        assert info.value.flag == "--web-search"


def test_an_index_placed_source_gets_one_index() -> None:
    """What file_search's citations will need: `file_citation` carries one `index`."""
    source = Source(1, {"type": "file_citation", "file_id": "file-1", "filename": "a.txt"},
                    placement="index")
    assert cite("See [1].", [source]) == [{"type": "file_citation", "file_id": "file-1",
                                          "filename": "a.txt", "index": 7}]
