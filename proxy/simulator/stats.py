"""The simulator's counters, read by tests through `GET /sim/stats`, zeroed by `POST /sim/reset`.

Invariants:
  - requests to `/sim/*` are not counted (reading the counters does not change them);
  - every stream that starts ends exactly once, as completed, aborted (the client left) or cut
    (`fail=cut` / a stall that timed out); between resets that no stream crosses,
    started == completed + aborted + cut + active;
  - `active_streams` is a gauge, so a reset keeps it, and `max_concurrent_streams` restarts from
    it; everything else goes back to zero or empty;
  - `prompt_counts` holds at most `limit` distinct prompts; a new prompt past that is counted in
    `prompt_counts_dropped` instead (memory stays bounded in a long benchmark).
"""

from __future__ import annotations

from typing import Any, Literal

StreamEnd = Literal["completed", "aborted", "cut"]

PROMPT_COUNTS_LIMIT = 10_000
REQUEST_IDS_KEPT = 32


class Stats:
    def __init__(self, prompt_limit: int = PROMPT_COUNTS_LIMIT) -> None:
        self.prompt_limit = prompt_limit
        self.active_streams = 0
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.by_path: dict[str, int] = {}
        self.chat_requests = 0
        self.embedding_requests = 0
        # Tokens the embeddings route reported in its usage: what the fleet embedded, for the
        # checks that every embedded token is charged to a key (tests/costbounds).
        self.embedding_tokens = 0
        self.streams_started = 0
        self.streams_completed = 0
        self.streams_aborted = 0
        self.streams_cut = 0
        self.completions_aborted = 0
        self.max_concurrent_streams = self.active_streams
        self.last_request: Any = None
        self.last_headers: dict[str, str] = {}
        # The last chat requests' x-request-id values, oldest first: one client request's
        # calls must not share one (vLLM's engine request id).
        self.request_ids: list[str] = []
        self.prompt_counts: dict[str, int] = {}
        self.prompt_counts_dropped = 0
        # Requests refused because their X-Request-Id was in flight (personas.py versions).
        self.duplicate_ids = 0
        # Prompt tokens found in the prefix cache, and those that were not (prefilled).
        self.prefix_hit_tokens = 0
        self.prefix_miss_tokens = 0

    def request(self, path: str) -> None:
        self.requests += 1
        self.by_path[path] = self.by_path.get(path, 0) + 1

    def chat(self, body: Any, headers: dict[str, str]) -> None:
        self.chat_requests += 1
        self.last_request = body
        self.last_headers = headers
        request_id = headers.get("x-request-id")
        if request_id is not None:
            self.request_ids = [*self.request_ids[-(REQUEST_IDS_KEPT - 1):], request_id]

    def prompt(self, text: str) -> None:
        if text in self.prompt_counts:
            self.prompt_counts[text] += 1
        elif len(self.prompt_counts) < self.prompt_limit:
            self.prompt_counts[text] = 1
        else:
            self.prompt_counts_dropped += 1

    def prefix(self, hit: int, miss: int) -> None:
        self.prefix_hit_tokens += hit
        self.prefix_miss_tokens += miss

    def stream_started(self) -> None:
        self.streams_started += 1
        self.active_streams += 1
        self.max_concurrent_streams = max(self.max_concurrent_streams, self.active_streams)

    def stream_ended(self, how: StreamEnd) -> None:
        self.active_streams -= 1
        if how == "completed":
            self.streams_completed += 1
        elif how == "aborted":
            self.streams_aborted += 1
        else:
            self.streams_cut += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.requests, "by_path": dict(self.by_path),
            "chat_requests": self.chat_requests, "embedding_requests": self.embedding_requests,
            "embedding_tokens": self.embedding_tokens,
            "streams_started": self.streams_started,
            "streams_completed": self.streams_completed,
            "streams_aborted": self.streams_aborted, "streams_cut": self.streams_cut,
            "completions_aborted": self.completions_aborted,
            "active_streams": self.active_streams,
            "max_concurrent_streams": self.max_concurrent_streams,
            "last_request": self.last_request, "last_headers": dict(self.last_headers),
            "request_ids": list(self.request_ids),
            "prompt_counts": dict(self.prompt_counts),
            "prompt_counts_dropped": self.prompt_counts_dropped,
            "duplicate_ids": self.duplicate_ids,
            "prefix_hit_tokens": self.prefix_hit_tokens,
            "prefix_miss_tokens": self.prefix_miss_tokens,
        }
