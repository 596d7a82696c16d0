"""The cost-bounds table: one row per route and input that expands, with its bound, stated
once. The tests read their limits from here and docs/SECURITY.md is rendered from it
(tests/costbounds/test_table.py checks that the two agree, so a new route joins both).

Bounds are stated for the suite's settings (tests/costbounds/harness.py): `--max-body-bytes`
1 MiB (B below; the rows of bodies at the default limit run a second proxy at 16 MiB),
`--max-file-bytes` 32 MiB (the default), `--max-queued-jobs` 32, `--worker-concurrency` 2 (W).
Each is chosen so that the bug the row guards against misses it by ten times or more on this
machine, while load alone does not reach it:
  - RSS: 4 x B + 16 MiB for one request. An idle create measures +0.1-0.3 MiB; 16 MiB is room
    for the allocator, GC timing and a Redis reply.
  - Event-loop stall: the target is 100 ms; the assertion is 1 s, because a loaded 2-core CI
    can delay a /healthz poll by a few hundred ms with no bug (an idle case measures 2-5 ms),
    while every stall bug seen stalls for several seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.services.vectors.memory import INGEST_MULTIPLE
from tests.costbounds.harness import MAX_BODY_BYTES, WORKER_CONCURRENCY, MiB

STALL_TARGET = 0.100  # seconds: the contract's figure
STALL_LIMIT = 1.0  # seconds: what the tests assert (see above)
RSS_CONSTANT = 16 * MiB
# The default --max-body-bytes (proxy/settings/groups.py): the bodies rows send to a second
# proxy at the default limits, where the parse and walks of one body are the cost.
DEFAULT_BODY_BYTES = 16 * MiB
ONE_REQUEST_RSS = 4 * MAX_BODY_BYTES + RSS_CONSTANT
CONCURRENT_FILE_READS = 8
INGESTED_FILE_BYTES = 8 * MiB
# One ingestion holds at most what it reserves of --ingest-memory-budget (services/vectors/
# memory.py: 8 x its file; measured 5.5-6.8 x: the file's text, its chunks, and the chunks'
# JSON for the one store write), plus the allocator's slack.
INGESTION_RSS = INGEST_MULTIPLE * INGESTED_FILE_BYTES + 8 * MiB
DOCUMENT_CPU = 5.0  # seconds of CPU one document's extraction may cost before it is abandoned
KEYING_CPU = 0.5  # seconds of CPU one request keyed for the cache may cost (linear work: ms)
# seconds: --header-timeout (10 s by default) or the idle keep-alive (5 s), plus slack
HEAD_BOUND = 15.0
# WebSocket connections one key may hold: --ws-max-connections-per-key by default
WS_PER_KEY_LIMIT = 16
FAIR_START_JOBS = 3 * WORKER_CONCURRENCY  # the contract's 2 x W, plus the W running
# Deferred tools the suite's 1 MiB body holds at ~470 bytes each (core/tools/toolsearch.py
# takes up to MAX_DEFERRED = 2,048 a request, each ranked on at most 2 KiB of its text).
DEFERRED_TOOLS = 2048
SEARCH_CPU = 1.0  # seconds of CPU for the whole create, its search included (measured ~0.1 s)
# A body of 2,048 small tool objects expands more than one of text (~12,000 dicts and their
# copies: parsed, echoed, stored): measured 17.6-18.8 MiB; 30.3 MiB while a search kept every
# tool's words (it now reads them one tool at a time).
TOOLS_RSS = 6 * MAX_BODY_BYTES + RSS_CONSTANT


@dataclass(frozen=True)
class Row:
    case: str  # the test's name in test_fast.py / test_heavy.py
    route: str
    input: str
    worst: str  # the worst request one can build within the limits, as the test sends it
    bound: str  # what is asserted
    point: str  # the review that set the bound (38.N: the cost-bounds one; 23: an earlier one)
    fast: bool  # in `make test`; the others in `make abuse` only

    @property
    def test(self) -> str:
        module = "test_fast" if self.fast else "test_heavy"
        return f"costbounds/{module}.py::{self.case}"


def _mib(n: float) -> str:
    return f"{n / MiB:g} MiB"


ROWS: tuple[Row, ...] = (
    Row("test_a_plain_create_is_the_baseline", "POST /v1/responses", "a small input",
        "one 2-word create", f"RSS ≤ {_mib(ONE_REQUEST_RSS)}, stall ≤ {STALL_TARGET * 1000:g} ms",
        "-", True),
    Row("test_cache_key_of_a_quote_flood_on_the_chat_route", "POST /v1/chat/completions "
        "(`--cache exact`)", "last user message (the cache key's near-miss guard)",
        "50,000 `“` (150 KB; quadratic in the bug: the whole 1 MiB body is 45x worse)",
        f"CPU ≤ {KEYING_CPU:g} s, stall ≤ {STALL_TARGET * 1000:g} ms", "38.1", True),
    Row("test_cache_key_of_a_quote_flood_on_the_responses_route", "POST /v1/responses "
        "(`--cache exact`)", "last user message (the cache key's near-miss guard)",
        "50,000 `“` (150 KB)", f"CPU ≤ {KEYING_CPU:g} s, stall ≤ {STALL_TARGET * 1000:g} ms",
        "38.1", True),
    Row("test_cache_key_of_a_quote_flood_with_the_semantic_cache", "POST /v1/chat/completions "
        "(`--cache semantic`)", "last user message (guard and embedding)", "50,000 `“`",
        f"CPU ≤ {KEYING_CPU:g} s, stall ≤ {STALL_TARGET * 1000:g} ms", "38.1", False),
    Row("test_a_chat_body_at_the_default_limit", "POST /v1/chat/completions (`--cache exact`, "
        "and off)", "the body: parse, part scan, cache key, upstream copy",
        f"{_mib(DEFAULT_BODY_BYTES)} (the default `--max-body-bytes`) of one user message of "
        "`“`, JSON and stream", f"stall ≤ {STALL_TARGET * 1000:g} ms", "38 (cost bounds)",
        False),
    Row("test_a_responses_body_at_the_default_limit", "POST /v1/responses (`--cache exact`, "
        "and off)", "the body: parse, items, translation, media scan, cache key",
        f"{_mib(DEFAULT_BODY_BYTES)}: one text of `“` (JSON); 2,048 items (the default "
        "`--max-input-items`) of ~500,000 one-letter text parts in all (stream)",
        f"stall ≤ {STALL_TARGET * 1000:g} ms", "38 (cost bounds)", False),
    Row("test_a_template_bomb_is_refused_before_it_is_rendered", "POST /v1/responses "
        "`prompt`", "stored template x (default or given) value",
        "52,428 `{{x}}` (256 KiB, the template limit) x a 4 KiB value, stored as the default "
        "or given by the create: 205 MiB rendered",
        f"400 naming `prompt` (or the template refused when stored); "
        f"RSS ≤ {_mib(ONE_REQUEST_RSS)}; no upstream call",
        "38.2", True),
    Row("test_a_template_bomb_is_refused_by_input_tokens", "POST /v1/responses/input_tokens "
        "`prompt`", "stored template x (default or given) value", "the same template",
        f"400 naming `prompt`; RSS ≤ {_mib(ONE_REQUEST_RSS)}", "38.2", True),
    Row("test_item_reference_fan_out", "POST /v1/responses", "`item_reference`s",
        "64 references to a 512 KiB item (32 MiB expanded) in a 4 KB body",
        f"400 naming `input[i].id`; RSS ≤ {_mib(ONE_REQUEST_RSS)}; no upstream call", "23",
        True),
    Row("test_a_chain_past_the_limit", "POST /v1/responses", "`previous_response_id`",
        "a chain of two 600 KB turns", f"400; RSS ≤ {_mib(ONE_REQUEST_RSS)}; no upstream call",
        "23", True),
    Row("test_a_conversation_past_the_limit", "POST /v1/responses", "`conversation`",
        "a conversation of three 400 KB items",
        f"400 naming `conversation`; RSS ≤ {_mib(ONE_REQUEST_RSS)}; no upstream call", "23",
        True),
    Row("test_input_files_by_id_are_refused_before_they_are_read", "POST /v1/responses",
        "`input_file` by `file_id`",
        f"{CONCURRENT_FILE_READS} concurrent creates naming one 32 MiB text file "
        "(the default `--max-file-bytes`)",
        f"400 each; RSS ≤ {CONCURRENT_FILE_READS} x 4 x B + 16 MiB = "
        f"{_mib(CONCURRENT_FILE_READS * 4 * MAX_BODY_BYTES + RSS_CONSTANT)}", "38.7", False),
    Row("test_a_runaway_pdf_as_input_file", "POST /v1/responses", "`input_file` PDF "
        "(`file_data`)", "a 5 KB PDF: one 400,000-operator content stream shared by 5 pages",
        f"400 `invalid_file`; CPU ≤ {DOCUMENT_CPU:g} s; stall ≤ {STALL_TARGET * 1000:g} ms",
        "38.8", False),
    Row("test_a_runaway_pdf_in_a_vector_store", "POST /v1/vector_stores/{id}/files",
        "an uploaded PDF", "the same PDF",
        f"file `failed` (`invalid_file`); CPU ≤ {DOCUMENT_CPU:g} s", "38.8", False),
    Row("test_ingestion_holds_a_small_multiple_of_the_file", "POST /v1/vector_stores/{id}/files",
        "an uploaded text file", f"{_mib(INGESTED_FILE_BYTES)} of plain text",
        f"RSS ≤ {INGEST_MULTIPLE} x file + 8 MiB = {_mib(INGESTION_RSS)}", "38.6", False),
    Row("test_a_batch_repeating_one_file_leaves_the_queue_to_others",
        "POST /v1/vector_stores/{id}/file_batches", "`file_ids`, `files`",
        "three batches naming one 1 MiB file 1,000 times (`file_ids`, then `files` twice) from a "
        "key with `max_streams: 1`",
        "another key's background create is accepted right after",
        "38.4", True),
    Row("test_a_batch_of_distinct_files_leaves_the_queue_to_others",
        "POST /v1/vector_stores/{id}/file_batches", "`file_ids`",
        "one batch of 40 distinct 64 KiB files (more than the queue holds)",
        "another key's background create is accepted right after", "38.4", True),
    Row("test_one_keys_background_creates_leave_the_queue_to_others",
        "POST /v1/responses `background`", "queue entries",
        "one key's background creates until it is refused (≤ 34 tries)",
        "that key gets 429 with Retry-After; another key still enqueues",
        "38.4/38.5", True),
    Row("test_another_keys_job_starts_within_two_job_lengths", "POST /v1/responses "
        "`background`", "queue order", "one key's backlog, then one job of another key",
        f"≤ {FAIR_START_JOBS} of the backlog's jobs end before the other key's job ends", "38.5",
        False),
    Row("test_search_counts_in_rpm", "POST /v1/vector_stores/{id}/search", "`query`",
        "5 searches by a key (`rpm: 2`) whose minute is spent",
        "each 429; no embedding call reaches the fleet", "38.9", True),
    Row("test_embedded_tokens_are_charged", "POST /v1/vector_stores/{id}/files, search",
        "an uploaded text file", "256 KiB of text for a key with `token_budget: 3000`",
        "the key is charged ≥ every token the fleet embedded; past its budget, search is 429 "
        "and embeds nothing", "38.10", True),
    Row("test_file_search_tokens_are_charged", "POST /v1/responses `file_search`", "the query",
        "one create searching a store",
        "the key is charged ≥ the chat tokens + every token the fleet embedded", "38.10", True),
    Row("test_no_client_url_reaches_a_replica_from_the_chat_route",
        "POST /v1/chat/completions", "content parts",
        "every part spelling vLLM fetches (`image_url`, `input_image`, type-less `image_url`/"
        "`video_url`/`audio_url`, …) x roles user/system/assistant, naming 169.254.169.254 "
        "and 10.0.0.7", "400, or nothing the client wrote in what reaches the replica",
        "38.3", True),
    Row("test_ipv6_spellings_of_private_addresses_are_refused",
        "POST /v1/responses `input_file.file_url`", "IP literals (MCP: resolved answers, "
        "in point 11's unit tests)",
        "NAT64 (`64:ff9b::/96`, `64:ff9b:1::/48`), 6to4 (`2002::/16`), IPv4-compatible and "
        "-mapped spellings of 169.254.169.254, 127.0.0.1, 10.0.0.1",
        "400 naming the part, as a private address", "38.11", True),
    Row("test_connections_without_a_request_head_are_closed", "any (the HTTP server)",
        "the request head", "a connection that sends nothing; one that sends half a head",
        f"closed within {HEAD_BOUND:g} s", "38.12", False),
    Row("test_websocket_connections_per_key_are_bounded", "GET /v1/responses (WebSocket)",
        "connections", f"{WS_PER_KEY_LIMIT + 1} idle connections of one key",
        f"at most {WS_PER_KEY_LIMIT} accepted; another key still connects", "38.13", True),
    Row("test_a_search_over_every_deferred_tool_a_body_holds", "POST /v1/responses "
        "`tool_search`", "deferred tools x the model's search query",
        f"{DEFERRED_TOOLS:,} deferred tools (the whole body) searched with an 800-word query "
        "(one 5 KB string)",
        f"CPU ≤ {SEARCH_CPU:g} s for the create; RSS ≤ {_mib(TOOLS_RSS)}; "
        f"stall ≤ {STALL_TARGET * 1000:g} ms", "tool search", True),
)


def markdown() -> str:
    """The table as docs/SECURITY.md carries it (between its markers)."""
    lines = ["| route | input | worst case within the limits | bound | issue | test |",
             "|---|---|---|---|---|---|"]
    for row in ROWS:
        lines.append(f"| {row.route} | {row.input} | {row.worst} | {row.bound} | {row.point} "
                     f"| `{row.test}` |")
    return "\n".join(lines) + "\n"


def row(case: str) -> Row:
    for candidate in ROWS:
        if candidate.case == case:
            return candidate
    raise KeyError(case)


BEGIN = "<!-- cost-bounds table: generated from tests/costbounds/table.py -->\n"
END = "<!-- end of the cost-bounds table -->"


def with_table(text: str) -> str:
    """`text` (a doc holding the markers) with the table between them replaced by this one."""
    head, rest = text.split(BEGIN, 1)
    return head + BEGIN + markdown() + END + rest.split(END, 1)[1]


if __name__ == "__main__":  # python -m tests.costbounds.table: rewrites the doc's copy
    from pathlib import Path

    doc = Path(__file__).resolve().parents[2] / "docs" / "SECURITY.md"
    doc.write_text(with_table(doc.read_text()))
