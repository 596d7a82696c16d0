"""The fuzzer's oracle and driver, shared by `make fuzz` (tests/fuzz/__main__.py, a real
uvicorn proxy) and the quick profile in `make test` (the app in-process).

For every case: no status of 500 or more; every 4xx body exactly
`{"error": {"message", "type", "param", "code"}}`; no stream that hides a server error (an
`error` event or `response.failed` of type `server_error`); and, for a rejected request, no
write to Redis while it ran. Writes are seen through Redis keyspace notifications (every
command that changes a key publishes its name), fenced by a marker the watcher publishes
itself: Redis delivers one connection's messages in order, so once the marker arrives every
write made before it has arrived too. Writes of earlier accepted requests still running (a
background job) can land in a rejected request's window: such a window is re-checked by
sending the same request again once Redis has been quiet, and only a write seen twice fails.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import redis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz import strategies as s

# Redis events that are not writes of a request (keys timing out, memory pressure).
_NOT_WRITES = {"expired", "evicted", "new"}
_MARKER = "fuzz:marker"


class Writes:
    """Every key Redis reports written, between two fences."""

    def __init__(self, url: str) -> None:
        self._redis = redis.Redis.from_url(url)
        self._redis.config_set("notify-keyspace-events", "KEA")
        self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        db = self._redis.connection_pool.connection_kwargs.get("db", 0)
        self._pubsub.psubscribe(f"__keyevent@{db}__:*")  # this database only
        self._pubsub.subscribe(_MARKER)
        self._lock = threading.Lock()
        self._events: list[tuple[str, str]] = []
        self._marks: set[str] = set()
        self._tokens = itertools.count()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="fuzz-writes", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stop.is_set():
            message = self._pubsub.get_message(timeout=0.2)
            if message is None:
                continue
            channel = message["channel"].decode()
            data = message["data"].decode("utf-8", "replace")
            with self._lock:
                if channel == _MARKER:
                    self._marks.add(data)
                else:
                    event = channel.rpartition(":")[2]
                    if event not in _NOT_WRITES:
                        self._events.append((event, data))

    def fence(self, timeout: float = 10.0) -> list[tuple[str, str]]:
        """The writes seen since the last fence (all of them: the marker came after)."""
        token = str(next(self._tokens))
        self._redis.publish(_MARKER, token)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if token in self._marks:
                    self._marks.discard(token)
                    events, self._events = self._events, []
                    return events
            time.sleep(0.002)
        raise AssertionError("the Redis watcher never saw its own marker")

    def quiet(self, *, still: float = 0.3, timeout: float = 15.0) -> None:
        """Until no write for `still` seconds (bounded by `timeout`)."""
        deadline = time.monotonic() + timeout
        self.fence()
        while time.monotonic() < deadline:
            time.sleep(still)
            if not self.fence():
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._pubsub.close()
        self._redis.close()


def check_error_body(status: int, body: Any, where: str) -> None:
    assert isinstance(body, dict) and set(body) == {"error"}, f"{where}: {status} {body!r}"
    error = body["error"]
    assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}, (
        f"{where}: {status} error keys {sorted(error) if isinstance(error, dict) else error}")
    assert isinstance(error["message"], str) and error["message"], f"{where}: empty message"
    assert "Traceback" not in error["message"], f"{where}: traceback in {error['message']!r}"
    assert isinstance(error["type"], str) and error["type"], f"{where}: bad type {error!r}"
    assert error["param"] is None or isinstance(error["param"], str), f"{where}: {error!r}"
    assert error["code"] is None or isinstance(error["code"], str), f"{where}: {error!r}"


def _sse_events(text: str) -> list[dict[str, Any]]:
    events = []
    for line in text.splitlines():
        if line.startswith("data: ") and line[6:].strip() != "[DONE]":
            try:
                events.append(orjson.loads(line[6:]))
            except orjson.JSONDecodeError:
                continue
    return events


def check_event(event: Any, where: str) -> None:
    """A streamed event that would hide a 5xx: an error event or a failure of the server."""
    if not isinstance(event, dict):
        return
    if event.get("type") == "error":
        status = event.get("status")
        assert not isinstance(status, int) or status < 500, f"{where}: error event {event!r}"
        if "error" in event:
            check_error_body(400, {"error": event["error"]}, where)
        code = event.get("code") or (event.get("error") or {}).get("code")
        assert code != "server_error", f"{where}: {event!r}"
    if event.get("type") == "response.failed":
        error = (event.get("response") or {}).get("error") or {}
        assert error.get("code") != "server_error", f"{where}: {event!r}"


def check_response(case: s.Case, response: httpx.Response) -> None:
    where = f"{case.method} {case.path}?{case.query} body={case.body[:300]!r}" if case.body \
        else f"{case.method} {case.path}?{case.query}"
    assert response.status_code < 500, f"{where}: {response.status_code} {response.text[:500]}"
    kind = response.headers.get("content-type", "")
    if response.status_code >= 400 and case.method != "HEAD":  # HEAD: headers only
        assert kind.startswith("application/json"), f"{where}: {response.status_code} {kind}"
        check_error_body(response.status_code, response.json(), where)
    elif kind.startswith("text/event-stream"):
        for event in _sse_events(response.text):
            check_event(event, where)


def send(client: httpx.Client, case: s.Case) -> httpx.Response:
    # Bytes: header values are latin-1 on the wire, which httpx would refuse as str.
    headers = {name: value.encode("latin-1") for name, value in case.headers.items()}
    return client.request(case.method, case.path, params=case.query, headers=headers,
                          content=case.body)


def http_targets(known: s.Known, key: str) -> dict[str, st.SearchStrategy[s.Case]]:
    """One strategy of cases per endpoint of docs/contract.md."""
    h = s.headers(key)
    resp = s.ids(known.responses)
    conv = s.ids(known.conversations)
    item = s.ids(known.items)
    creates = s.mutated(s.create_bodies(known))

    def case(method: str, path: st.SearchStrategy[str], body: st.SearchStrategy[Any] | None = None
             ) -> st.SearchStrategy[s.Case]:
        return st.builds(s.Case, st.just(method), path, s.QUERY, h,
                         body if body is not None else st.none())

    def under(template: str, *parts: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.tuples(*parts).map(lambda values: template.format(*values))

    # The deletes last: they may remove the objects the other targets aim at.
    return {
        "POST /v1/responses": case("POST", st.just("/v1/responses"), creates),
        "POST /v1/responses/input_tokens": case("POST", st.just("/v1/responses/input_tokens"),
                                                creates),
        "GET /v1/responses/{id}": case("GET", under("/v1/responses/{}", resp)),
        "POST /v1/responses/{id}/cancel": case("POST", under("/v1/responses/{}/cancel", resp),
                                               st.one_of(st.none(), st.binary(max_size=20))),
        "GET /v1/responses/{id}/input_items": case("GET", under(
            "/v1/responses/{}/input_items", resp)),
        "POST /v1/conversations": case("POST", st.just("/v1/conversations"),
                                       s.mutated(s.conversation_bodies(known))),
        "GET /v1/conversations/{id}": case("GET", under("/v1/conversations/{}", conv)),
        "POST /v1/conversations/{id}": case("POST", under("/v1/conversations/{}", conv),
                                            s.mutated(st.fixed_dictionaries(
                                                {}, optional={"metadata": s.METADATA}))),
        "GET /v1/conversations/{id}/items": case("GET", under("/v1/conversations/{}/items",
                                                              conv)),
        "POST /v1/conversations/{id}/items": case("POST", under(
            "/v1/conversations/{}/items", conv), s.mutated(st.fixed_dictionaries(
                {"items": st.lists(s.items(known), max_size=4)}))),
        "GET /v1/conversations/{id}/items/{item}": case("GET", under(
            "/v1/conversations/{}/items/{}", conv, item)),
        "POST /v1/chat/completions": case("POST", st.just("/v1/chat/completions"),
                                          s.mutated(s.chat_bodies())),
        "GET /v1/models": case("GET", st.just("/v1/models")),
        "GET /healthz /readyz /metrics, other routes": st.builds(
            s.Case, st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]),
            st.one_of(st.sampled_from(["/healthz", "/readyz", "/metrics", "/v1", "/v1/",
                                       "/v1/responses/", "/v1/responses//cancel",
                                       "/v1/embeddings", "/v1/files"]),
                      s.TEXT.map(lambda t: "/v1/" + quote(t, safe="/"))),
            s.QUERY, h, st.one_of(st.none(), st.binary(max_size=40))),

        "DELETE /v1/conversations/{id}/items/{item}": case("DELETE", under(
            "/v1/conversations/{}/items/{}", conv, item)),
        "DELETE /v1/conversations/{id}": case("DELETE", under("/v1/conversations/{}", conv)),
        "DELETE /v1/responses/{id}": case("DELETE", under("/v1/responses/{}", resp)),
    }


@dataclass
class Tally:
    """Cases run per target, and rejected cases checked against Redis."""

    cases: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    # Rejected cases re-sent because a write landed in their window (none repeated it).
    rechecked: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)
    statuses: dict[str, dict[int, int]] = field(default_factory=dict)

    def add(self, name: str, rejected: bool, status: int = 0) -> None:
        self.cases[name] = self.cases.get(name, 0) + 1
        if rejected:
            self.rejected[name] = self.rejected.get(name, 0) + 1
        seen = self.statuses.setdefault(name, {})
        seen[status] = seen.get(status, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.cases.values())


def run_cases(strategy: st.SearchStrategy[Any], check: Callable[[Any], None], *,
              examples: int | None = None, seconds: float | None = None,
              batch: int = 50) -> None:
    """`check` on generated values: `examples` of them, or batches until `seconds` pass.
    Generation only (no shrinking: a failure is reported as drawn, with the case in its
    message), no example database, no deadline (a loaded machine is slow, not wrong)."""
    stop_at = time.monotonic() + seconds if seconds is not None else None
    left = examples

    while True:
        n = batch if left is None else min(batch, left)
        if n <= 0:
            return

        @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        # Drawn inside (not `given(value=strategy)`): hypothesis would otherwise build the
        # repr of the whole strategy tree, tens of kB, for its reports.
        @given(data=st.data())
        def batch_of(data: st.DataObject) -> None:
            check(data.draw(strategy, label="case"))

        batch_of()
        if left is not None:
            left -= n
        if stop_at is not None and time.monotonic() >= stop_at:
            return


def http_checker(client: httpx.Client, writes: Writes | None, tally: Tally,
                 name: str) -> Callable[[s.Case], None]:
    def check(case: s.Case) -> None:
        if writes is not None:
            writes.fence()
        response = send(client, case)
        check_response(case, response)
        rejected = 400 <= response.status_code < 500
        if writes is not None and rejected:
            written = writes.fence()
            if written:
                # Maybe an earlier accepted request's job: again, once Redis is quiet.
                tally.rechecked.append((name, written[:5]))
                writes.quiet()
                again = send(client, case)
                written = writes.fence()
                assert not (400 <= again.status_code < 500 and written), (
                    f"{case.method} {case.path} body={case.body!r:.300}: rejected "
                    f"({again.status_code}) yet wrote {written[:10]}")
        tally.add(name, rejected, response.status_code)

    return check


def assert_healthy(client: httpx.Client) -> None:
    assert client.get("/healthz").status_code == 200
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text


# -- WebSocket ---------------------------------------------------------------------------------
TERMINAL = {"response.completed", "response.incomplete", "response.failed",
            "response.cancelled"}
SENTINEL = "not json"  # always answered with one `invalid_json` error frame


def _parsed(frame: str | bytes) -> Any:
    try:
        return orjson.loads(frame)
    except orjson.JSONDecodeError:
        return _NOT_JSON


_NOT_JSON = object()


def ws_exchange(ws: Any, frame: str | bytes, *, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Sends one fuzzed frame and reads what it causes, all of it: a create runs to its
    terminal event or its error frame; any other frame is followed by the sentinel, and the
    reading stops at the sentinel's `invalid_json` error, so an ignored frame costs no wait.
    A fuzzed frame that is not JSON is answered first by one error of its own: `invalid_json`,
    or `frame_too_large` when it is also over `--max-body-bytes` (the size is judged before
    the parse), so its own error is skipped whatever its code, not counted as a sentinel's."""
    where = f"ws frame {frame[:300]!r}"
    value = _parsed(frame)
    creates = isinstance(value, dict) and value.get("type") == "response.create"
    ws.send(frame)
    own_error = value is _NOT_JSON  # the fuzzed frame's own error comes before the sentinel's
    if not creates:
        ws.send(SENTINEL)
    received: list[dict[str, Any]] = []
    while True:
        message = orjson.loads(ws.recv(timeout=timeout))
        assert isinstance(message, dict), f"{where}: {message!r}"
        check_event(message, where)
        kind = message.get("type")
        if kind == "error":
            assert isinstance(message.get("status"), int), f"{where}: {message!r}"
            check_error_body(message["status"], {"error": message.get("error")}, where)
        received.append(message)
        if creates and (kind in TERMINAL or kind == "error"):
            return received
        if creates or kind != "error":
            continue
        code = message["error"]["code"]
        if own_error:
            assert code in ("invalid_json", "frame_too_large"), f"{where}: {message!r}"
            own_error = False
        elif code == "invalid_json":
            return received


# -- set-up -----------------------------------------------------------------------------------
def make_known(client: httpx.Client, key: str) -> s.Known:
    """Objects of the fuzzer's key for the cases to hit: two stored responses (one chained),
    a conversation with items."""
    auth = {"authorization": f"Bearer {key}"}
    first = client.post("/v1/responses", headers=auth, json={
        "model": s.MODEL, "input": "hello", "metadata": {"k": "v"}})
    assert first.status_code == 200, first.text
    second = client.post("/v1/responses", headers=auth, json={
        "model": s.MODEL, "input": "again", "previous_response_id": first.json()["id"]})
    assert second.status_code == 200, second.text
    conversation = client.post("/v1/conversations", headers=auth, json={
        "items": [{"role": "user", "content": "hi"}], "metadata": {"topic": "fuzz"}})
    assert conversation.status_code == 200, conversation.text
    conv_id = conversation.json()["id"]
    listed = client.get(f"/v1/conversations/{conv_id}/items", headers=auth)
    item_ids = [item["id"] for item in listed.json()["data"]]
    item_ids += [item["id"] for item in first.json()["output"]]
    return s.Known(responses=(first.json()["id"], second.json()["id"]),
                   conversations=(conv_id,), items=tuple(item_ids))


def fuzz_http(client: httpx.Client, known: s.Known, key: str, writes: Writes | None,
              tally: Tally, *, examples: int | None = None,
              seconds: float | None = None) -> None:
    """Every HTTP target in turn, `examples` cases or `seconds` each, then the health check."""
    for name, strategy in http_targets(known, key).items():
        run_cases(strategy, http_checker(client, writes, tally, name), examples=examples,
                  seconds=seconds)
        assert_healthy(client)


def ws_checker(ws: Any, writes: Writes | None, tally: Tally,
               name: str) -> Callable[[str | bytes], None]:
    """`ws_exchange` per frame; a frame answered only by error frames (a rejected create,
    a frame that is not one) must not have written to Redis, checked as for HTTP."""
    def check(frame: str | bytes) -> None:
        if writes is not None:
            writes.fence()
        received = ws_exchange(ws, frame)
        rejected = bool(received) and all(m.get("type") == "error" for m in received)
        if writes is not None and rejected:
            written = writes.fence()
            if written:
                writes.quiet()
                again = ws_exchange(ws, frame)
                written = writes.fence()
                assert not (all(m.get("type") == "error" for m in again) and written), (
                    f"ws frame {frame[:300]!r}: rejected yet wrote {written[:10]}")
        tally.add(name, rejected, 400 if rejected else 200)

    return check
