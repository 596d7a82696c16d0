"""The access log's own way into the proxy's handler (telemetry/logs.py `LineHandler`,
web/middleware/access.py `write_access`): the same bytes as the LogRecord path in both formats,
no LogRecord made, the lines of one loop turn written by one call once the turn is over, in
order with every other line; plain logging (the record, `extra` included) whenever anything
else looks at the line."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from proxy.core.context.requestctx import CURRENT, RequestContext
from proxy.telemetry.logs import LineHandler, access_writer, configure_logging
from proxy.web.middleware.access import _LINE, write_access
from tests.support.logs import root_logging_kept

FIELDS: dict[str, Any] = {"method": "POST", "route": "/v1/responses", "status": 200,
                          "duration_ms": 12.3, "key_id": "k0123456789ab", "cache": "-",
                          "replica": "http://127.0.0.1:8000"}
SCOPE = {"type": "http", "method": "POST", "state": {"tenant": "k0123456789abcdef"}}


class Counted(io.StringIO):
    """A stream that counts the calls that write to it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def _logger(handler: logging.Handler) -> logging.Logger:
    """`proxy.access` outside the process's tree: its one handler, nothing above it."""
    log = logging.Logger("proxy.access", logging.INFO)
    log.addHandler(handler)
    return log


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    made: list[logging.LogRecord] = []
    factory = logging.getLogRecordFactory()

    def counting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        made.append(record)
        return record

    logging.setLogRecordFactory(counting)
    try:
        yield made
    finally:
        logging.setLogRecordFactory(factory)


@pytest.fixture
def request_id() -> Iterator[str]:
    token = CURRENT.set(RequestContext("req-lines-1"))
    try:
        yield "req-lines-1"
    finally:
        CURRENT.reset(token)


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("now", [1_764_400_000.0, 1_764_400_059.9996, 1_764_400_061.042])
def test_the_line_is_the_formatters_byte_for_byte(fmt: str, now: float,
                                                  request_id: str) -> None:
    stream = io.StringIO()
    handler = LineHandler(stream, fmt)
    log = _logger(handler)
    handler.write_access(log.name, _LINE % FIELDS, FIELDS, now)  # no loop: written at once
    record = log.makeRecord(log.name, logging.INFO, __file__, 1, _LINE, (FIELDS,), None,
                            extra={"access": FIELDS})
    record.created, record.msecs = now, int((now - int(now)) * 1000) + 0.0
    log.handle(record)
    fast, plain = stream.getvalue().splitlines()
    assert fast == plain
    assert request_id in fast
    if fmt == "json":
        assert orjson.loads(fast)["pid"] == os.getpid()


async def test_no_record_and_one_write_per_loop_turn(records: list[logging.LogRecord],
                                                     request_id: str) -> None:
    import asyncio

    stream = Counted()
    log = _logger(LineHandler(stream, "json"))
    context = RequestContext(request_id, replica="http://r1")
    for status in (200, 404, 0):
        write_access(log, SCOPE, status, 0.0123, "-", context, "/v1/responses")
    assert stream.writes == 0  # held for the rest of this turn only
    await asyncio.sleep(0)
    assert records == []
    assert stream.writes == 1
    lines = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["status"] for line in lines] == [200, 404, 499]
    assert {line["request_id"] for line in lines} == {request_id}
    assert lines[0]["key_id"] == "k0123456789ab" and lines[0]["replica"] == "http://r1"
    assert lines[0]["message"] == ("POST /v1/responses 200 12.3ms key=k0123456789ab cache=- "
                                   "replica=http://r1")


async def test_pending_lines_go_out_before_any_other_line_and_on_flush(
        request_id: str) -> None:
    stream = io.StringIO()
    handler = LineHandler(stream, "text")
    log = _logger(handler)
    context = RequestContext(request_id)
    write_access(log, SCOPE, 200, 0.001, "-", context, "/a")
    log.warning("something else")
    write_access(log, SCOPE, 201, 0.001, "-", context, "/b")
    handler.flush()  # what logging.shutdown does at exit
    lines = stream.getvalue().splitlines()
    assert [line.split(": ", 1)[1].split(" ")[:3] for line in lines] == [
        ["POST", "/a", "200"], ["something", "else"], ["POST", "/b", "201"]]


def test_a_second_handler_a_filter_or_another_formatter_get_the_record(
        records: list[logging.LogRecord]) -> None:
    handler = LineHandler(io.StringIO(), "text")
    log = _logger(handler)
    assert access_writer(log) is handler
    other = logging.Handler()
    log.parent = logging.Logger("proxy")  # a handler further up the chain
    log.parent.addHandler(other)
    assert access_writer(log) is None
    log.parent = None
    log.addFilter(logging.Filter("proxy"))
    assert access_writer(log) is None
    log.removeFilter(log.filters[0])
    handler.setFormatter(logging.Formatter("%(message)s"))
    assert access_writer(log) is None
    write_access(log, SCOPE, 200, 0.001, "hit", RequestContext("r"), "/v1/responses")
    [record] = records
    assert record.access["cache"] == "hit"  # type: ignore[attr-defined]


def test_a_forked_child_writes_its_own_pid() -> None:
    handler = LineHandler(io.StringIO(), "json")
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        handler.stream = os.fdopen(writer, "w")
        handler.write_access("proxy.access", "m", {}, 1_764_400_000.0)
        handler.stream.flush()
        os._exit(0)
    os.close(writer)
    try:
        line = os.read(reader, 1000)
    finally:
        os.close(reader)
        os.waitpid(child, 0)
    assert orjson.loads(line)["pid"] == child
    assert handler.pid == os.getpid()


async def test_configure_logging_installs_the_line_handler_and_flushes_the_old_one(
) -> None:
    first, second = io.StringIO(), io.StringIO()
    with root_logging_kept() as root:
        configure_logging("info", "text", stream=first)
        [old] = [h for h in root.handlers if isinstance(h, LineHandler)]
        old.write_access("proxy.access", "pending", {}, 1_764_400_000.0)
        assert first.getvalue() == ""  # until this loop turn ends
        configure_logging("info", "text", stream=second)
        assert "pending" in first.getvalue()


def test_without_process_ids_in_records_the_line_has_none_either(
        monkeypatch: pytest.MonkeyPatch, request_id: str) -> None:
    monkeypatch.setattr(logging, "logProcesses", False)
    stream = io.StringIO()
    handler = LineHandler(stream, "json")
    log = _logger(handler)
    handler.write_access(log.name, "m", {}, 1_764_400_000.0)
    log.info("m")
    fast, plain = (orjson.loads(line) for line in stream.getvalue().splitlines())
    assert fast["pid"] is None and plain["pid"] is None
