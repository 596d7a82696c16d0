"""process/headwrite.py on uvicorn's httptools protocol (process/headtimeout.py): a response's
head leaves with its first body bytes in one write (those of a task started with it too), or
alone once the loop has run what was ready with it (a head never waits for a slow first body),
and each later write goes straight to the connection.
Driven in process on a recording transport: writes counted, not timed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HEADER_VALUE_RE, RequestResponseCycle
from uvicorn.server import ServerState

from proxy.process.headtimeout import protocol_for
from proxy.process.headwrite import quick_start
from proxy.web.middleware.access import QUICK_START

REQUEST = b"GET /x HTTP/1.1\r\nHost: proxy\r\n\r\n"
App = Callable[[Any, Any, Any], Awaitable[None]]


class Recording(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _served(app: App, transport: Recording, turns: int = 20, *,
                  access_log: bool = True) -> Recording:
    """One request through the protocol on `transport`, until the app is done (bounded)."""
    config = uvicorn.Config(app, http=protocol_for("httptools", 10.0), log_level="warning",
                            lifespan="off", access_log=access_log)
    config.load()
    protocol: Any = config.http_protocol_class(  # type: ignore[call-arg]
        config=config, server_state=ServerState(), app_state={})
    protocol.connection_made(transport)
    protocol.data_received(REQUEST)
    for _ in range(turns):
        await asyncio.sleep(0)
        if protocol.cycle.response_complete:
            break
    await asyncio.sleep(0)
    protocol.connection_lost(None)
    return transport


async def test_a_head_leaves_with_the_first_body_bytes() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(0)  # the app's own work first: the head is held from its start
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    transport = await _served(app, Recording())
    [written] = transport.writes
    assert written.startswith(b"HTTP/1.1 200 OK\r\n") and written.endswith(b"\r\n\r\nok")


async def test_a_head_leaves_with_the_first_bytes_of_the_task_it_started() -> None:
    """A stream's shape (web/eventstream.py): the head sent, then a task started that writes
    the events; its first step writes the first event, which takes the head with it."""
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})

        async def events() -> None:
            await send({"type": "http.response.body", "body": b"data: 1\n\n",
                        "more_body": True})
            await asyncio.sleep(0)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        await asyncio.create_task(events())

    transport = await _served(app, Recording())
    assert len(transport.writes) == 2
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[0].endswith(b"\r\n\r\n9\r\ndata: 1\n\n\r\n")


async def test_a_head_does_not_wait_for_a_slow_body_and_later_writes_go_straight() -> None:
    transport = Recording()
    heads_out: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for _ in range(2):  # the head's turn and the next with no token yet:
            await asyncio.sleep(0)
        # the head is out by now
        heads_out.append(len(transport.writes))
        for token in (b"a", b"b"):
            await send({"type": "http.response.body", "body": token, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    await _served(app, transport)
    assert heads_out == [1]
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[1:] == [b"1\r\na\r\n", b"1\r\nb\r\n", b"0\r\n\r\n"]


async def test_a_connection_closed_after_a_head_alone_gets_the_head_first() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})
        raise RuntimeError("bug")  # uvicorn closes the connection, the head sent

    transport = await _served(app, Recording())
    assert transport.closed
    [head] = transport.writes
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")


# -- quick_start: the head uvicorn writes, with two searches in all ---------------------------

# (method, status, headers, keep-alive): heads `quick_start` writes itself...
_PLAIN: list[tuple[str, int, list[Any], bool]] = [
    ("POST", 200, [(b"content-type", b"text/event-stream; charset=utf-8"),
                   (b"cache-control", b"no-store"), (b"x-accel-buffering", b"no"),
                   (b"x-request-id", b"req_1")], True),  # a stream's head
    ("POST", 200, [(b"content-type", b"application/json"), (b"Content-Length", b"17")], True),
    ("GET", 200, [(b"content-length", b"0")], False),  # keep-alive off: `connection: close`
    ("HEAD", 200, [(b"content-type", b"text/plain")], True),  # no chunking for HEAD
    ("GET", 204, [], True),
    ("GET", 304, [(b"etag", b'"x"')], True),
    ("GET", 200, [[b"x-note", b"tab\tinside"]], True),  # a tab is a value's right; a list pair
]
# ...and those it leaves to uvicorn's `send` (headers uvicorn acts on, or a false alarm of
# theirs: the slow way, the same bytes).
_LEFT: list[tuple[str, int, list[Any], bool]] = [
    ("GET", 200, [(b"transfer-encoding", b"chunked")], True),
    ("GET", 200, [(b"connection", b"close"), (b"content-length", b"0")], True),
    ("GET", 200, [(b"x-connection-id", b"7")], True),
    ("GET", 200, [(b"content-length", b"1"), (b"content-length", b"1")], True),
    ("GET", 200, [(b"x-content-length", b"1")], True),
]


@pytest.fixture(autouse=True)
def fresh_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with nothing seen (the caches are process-wide)."""
    from proxy.process import headwrite

    monkeypatch.setattr(headwrite, "_NAMES_SEEN", headwrite._Seen())
    monkeypatch.setattr(headwrite, "_VALUES_SEEN", headwrite._Seen())


def _cycle(method: str, keep_alive: bool, *,
           expect_100: bool = False) -> tuple[Any, Recording]:
    transport = Recording()
    flow = type("Flow", (), {"write_paused": False})()
    cycle = RequestResponseCycle(
        scope={"method": method}, transport=transport, flow=flow,  # type: ignore[typeddict-item]
        logger=logging.getLogger("t"), access_logger=logging.getLogger("t"), access_log=False,
        default_headers=[(b"date", b"Mon, 30 Nov 2026 00:00:00 GMT")],
        message_event=asyncio.Event(), expect_100_continue=expect_100, keep_alive=keep_alive,
        on_response=lambda: None)
    return cycle, transport


def _state(cycle: RequestResponseCycle, transport: Recording) -> tuple[Any, ...]:
    return (transport.writes, cycle.response_started, cycle.chunked_encoding,
            cycle.expected_content_length, cycle.keep_alive, cycle.waiting_for_100_continue)


@pytest.mark.parametrize(("method", "status", "headers", "keep_alive"), _PLAIN + _LEFT)
async def test_a_start_is_written_as_uvicorn_writes_it(
        method: str, status: int, headers: list[tuple[bytes, bytes]], keep_alive: bool) -> None:
    start = {"type": "http.response.start", "status": status, "headers": headers}
    theirs, their_transport = _cycle(method, keep_alive)
    await theirs.send(start)
    ours, our_transport = _cycle(method, keep_alive)
    quick = quick_start(ours.send, start)
    assert quick == ((method, status, headers, keep_alive) in _PLAIN)
    if not quick:  # left untouched, for uvicorn's `send`
        assert _state(ours, our_transport) == ([], False, None, 0, keep_alive, False)
        await ours.send(start)
    assert _state(ours, our_transport) == _state(theirs, their_transport)


async def test_a_quick_start_ends_the_wait_for_100_continue_as_uvicorn_does() -> None:
    """Else a later `receive` would write `100 Continue` after the response's head."""
    start = {"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]}
    theirs, their_transport = _cycle("POST", True, expect_100=True)
    await theirs.send(start)
    ours, our_transport = _cycle("POST", True, expect_100=True)
    assert ours.waiting_for_100_continue and quick_start(ours.send, start)
    assert _state(ours, our_transport) == _state(theirs, their_transport)
    assert not ours.waiting_for_100_continue


@pytest.mark.parametrize("state", ["response_started", "disconnected", "write_paused",
                                   "access_log"])
async def test_a_start_uvicorn_must_see_itself_is_left_to_it(state: str) -> None:
    """A response already started, a client gone, a paused write (uvicorn drains first), an
    access log to write: nothing done here."""
    cycle, transport = _cycle("GET", True)
    setattr(cycle.flow if state == "write_paused" else cycle, state, True)
    start = {"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]}
    assert not quick_start(cycle.send, start)
    assert transport.writes == [] and cycle.response_started == (state == "response_started")


async def test_a_send_that_is_not_an_httptools_cycles_is_left_alone() -> None:
    async def send(message: Any) -> None:
        raise AssertionError("not for this one")

    start = {"type": "http.response.start", "status": 200, "headers": []}
    assert not quick_start(send, start)


@pytest.mark.parametrize("start", [
    {"type": "http.response.start", "status": 200, "headers": [(b"bad name", b"x")]},
    {"type": "http.response.start", "status": 200, "headers": [(b"x-ok", b"line\nbreak")]},
    {"type": "http.response.start", "status": 200, "headers": [("x-str", "not bytes")]},
    {"type": "http.response.start", "status": 200, "headers": [(b"x-one",)]},
    {"type": "http.response.start", "status": 200, "headers": None},
    {"type": "http.response.start", "headers": []},  # no status
    {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"x")]},
])
async def test_a_malformed_start_is_left_to_uvicorn_which_refuses_it_in_its_own_way(
        start: dict[str, Any]) -> None:
    theirs, their_transport = _cycle("GET", True)
    with pytest.raises(Exception) as their_error:
        await theirs.send(start)
    ours, our_transport = _cycle("GET", True)
    assert not quick_start(ours.send, start)
    with pytest.raises(Exception) as our_error:
        await ours.send(start)
    assert (our_error.type, str(our_error.value)) == (their_error.type, str(their_error.value))
    assert _state(ours, our_transport) == _state(theirs, their_transport)


async def test_the_proxy_protocol_offers_each_request_its_quick_start() -> None:
    """The app finds the cycle's writer in the scope; the start it wrote is the response's
    (uvicorn's `send` takes the body as that of a started response) and leaves with the body."""
    async def app(scope: Any, receive: Any, send: Any) -> None:
        start = {"type": "http.response.start", "status": 200,
                 "headers": [(b"content-length", b"2")]}
        assert scope[QUICK_START](send, start)
        assert QUICK_START in scope and scope[QUICK_START] is quick_start  # nothing bound
        await send({"type": "http.response.body", "body": b"ok"})

    transport = await _served(app, Recording(), access_log=False)  # (the proxy's: its own)
    [written] = transport.writes
    assert written.startswith(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n")
    assert written.endswith(b"\r\n\r\nok")


@pytest.mark.parametrize("beneath", [False, True])
async def test_the_front_hands_a_start_to_the_quick_writer_only_when_its_send_is_the_servers(
        beneath: bool) -> None:
    """web/middleware/front.py: the start (our request id echoed) goes to `QUICK_START` when
    nothing sits between the front and the server's `send`; beneath a wrapper of ours (the
    tracing middleware reads the start), the wrapper gets it."""
    from proxy.core.context.requestctx import RequestContext
    from proxy.web.middleware.access import BODY_SEND
    from proxy.web.middleware.front import _Answer

    start = {"type": "http.response.start", "status": 200,
             "headers": [(b"content-type", b"application/json")]}
    quick: list[Any] = []
    sent: list[Any] = []

    async def server_send(message: Any) -> None:
        sent.append(message)

    async def wrapper(message: Any) -> None:
        await server_send(message)

    def writer(send: Any, message: Any) -> bool:
        assert send is server_send
        quick.append(message)
        return True

    scope = {"type": "http", BODY_SEND: server_send, QUICK_START: writer}
    answer = _Answer(scope, wrapper if beneath else server_send, 0.0, RequestContext("req_1"),
                     None)
    await answer.send(start)
    assert (len(quick), len(sent)) == ((0, 1) if beneath else (1, 0))
    [written] = quick or sent
    assert (b"x-request-id", b"req_1") in written["headers"] and answer.status == 200


async def test_what_a_search_passed_is_not_searched_again_and_nothing_refused_is_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.process import headwrite

    monkeypatch.setattr(headwrite, "_NAMES_SEEN", headwrite._Seen(bound=4))
    monkeypatch.setattr(headwrite, "_VALUES_SEEN", headwrite._Seen(bound=4))
    searched: list[bytes] = []
    pattern = HEADER_VALUE_RE

    class Counting:
        def search(self, data: bytes) -> Any:
            searched.append(data)
            return pattern.search(data)

    monkeypatch.setattr(headwrite, "HEADER_VALUE_RE", Counting())
    start = {"type": "http.response.start", "status": 200,
             "headers": [(b"content-type", b"text/plain"), (b"x-request-id", b"req_1")]}
    for request_id in (b"req_1", b"req_2"):
        start["headers"][1] = (b"x-request-id", request_id)  # type: ignore[index]
        cycle, _ = _cycle("GET", True)
        assert quick_start(cycle.send, start)
    # The second head searched only its new id (the date and the type were seen).
    assert searched[1] == b"req_2"
    bad = {"type": "http.response.start", "status": 200, "headers": [(b"x-bad", b"a\nb")]}
    cycle, _ = _cycle("GET", True)
    assert not quick_start(cycle.send, bad)
    assert b"a\nb" not in headwrite._VALUES_SEEN and b"x-bad" not in headwrite._NAMES_SEEN
    # A refused name is not kept either; nor does a value that passed pass as a name.
    for headers in ([(b"bad name", b"v")], [(b"x-ok", b"a b")], [(b"a b", b"v")]):
        cycle, _ = _cycle("GET", True)
        quick = quick_start(cycle.send, {"type": "http.response.start", "status": 200,
                                         "headers": headers})
        assert quick == (headers == [(b"x-ok", b"a b")]), headers
    assert b"bad name" not in headwrite._NAMES_SEEN and b"a b" not in headwrite._NAMES_SEEN
    # Only bytes, and not long ones, are kept.
    headwrite._VALUES_SEEN.keep([b"x" * 300, bytearray(b"y")])
    assert b"x" * 300 not in headwrite._VALUES_SEEN and b"y" not in headwrite._VALUES_SEEN
    # Bounded: forgotten whole when full (a request's id is new every time).
    for n in range(10):
        headwrite._VALUES_SEEN.keep({b"v%d" % n})
    assert len(headwrite._VALUES_SEEN) <= 4
