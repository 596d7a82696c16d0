"""The process's one logging set-up: `text` (human) or `json` (one object per line, for log
pipelines), and the current request's id on every line (core/context/requestctx.py).

The id is added by a filter on the handler, so it covers every logger (ours, uvicorn's,
redis-py's) and is read when the line is written, in the request's own context. Log lines carry
no prompt or output text and no keys: no code path logs a body, and the access log
(web/middleware/access.py) logs a key only as a digest.

The access log's own way in (`access_writer`, `LineHandler.write_access`): one line per request
went through `Logger.info` at 33-75 µs (a LogRecord ~15-20 µs with its getpid and thread
look-ups, the formatter and its strftime ~15, the handler's lock and one write syscall per line
~20). When this handler is the only one that would see the line and nothing filters it, the
access log hands it the finished line instead: the same bytes (a test compares them with the
formatter's), its timestamp's strftime made once per second, and the lines of one loop turn
written together by one call at the start of the next turn. Any other set-up (a second
handler, pytest's capture, a filter, another formatter) gets the plain LogRecord, `extra`
included.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
import weakref
from collections.abc import Mapping
from typing import IO, Any

import orjson

from proxy.core.context.requestctx import current_request_id

LOG_FORMATS = ("text", "json")
_TEXT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id() or "-"
        return True


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "pid", "request_id", "message"}`, plus the access log's
    fields (method, route, status, ...) as keys of their own, and `exc` for a traceback. `pid`
    tells the processes of `serve --workers N` apart (they share one output)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "request_id": getattr(record, "request_id", "-"),
            "message": record.getMessage(),
        }
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            line.update(access)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `configure_logging` installs: a StreamHandler (every record as usual) that
    also takes the access log's finished lines, pending until the loop's next turn (or any
    record, flush or shutdown, which write them first: the output keeps its order)."""

    def __init__(self, stream: IO[str], fmt: str) -> None:
        super().__init__(stream)
        self.json = fmt == "json"
        self.own_formatter = JsonFormatter() if self.json else logging.Formatter(_TEXT)
        self.own_filter = RequestIdFilter()
        self.setFormatter(self.own_formatter)
        self.addFilter(self.own_filter)
        # The JSON lines' pid, read once (a LogRecord asks the kernel every time); a forked
        # child (serve --workers N) reads its own.
        self.pid = os.getpid()
        self._pending: list[str] = []
        self._second = -1
        self._stamp = ""
        own = weakref.WeakMethod(self._forked)
        os.register_at_fork(after_in_child=lambda: _call(own))

    def _forked(self) -> None:
        self.pid = os.getpid()

    def writes_alone(self) -> bool:
        """True while this handler still is as installed: its one filter, its formatter, a
        level that lets INFO through."""
        return (self.formatter is self.own_formatter and self.level <= logging.INFO
                and len(self.filters) == 1 and self.filters[0] is self.own_filter)

    def write_access(self, name: str, message: str, fields: Mapping[str, object],
                     now: float) -> None:
        """The line `Logger.info(message, extra={"access": fields})` would write at `now`
        (time.time()), without the record."""
        second = int(now)
        if second != self._second:
            # formatTime's own form (time.localtime, "%Y-%m-%d %H:%M:%S"), made once a second.
            self._stamp = time.strftime(self.own_formatter.default_time_format,
                                        self.own_formatter.converter(second))
            self._second = second
        stamp = f"{self._stamp},{int((now - second) * 1000):03d}"
        level = logging.getLevelName(logging.INFO)
        request_id = current_request_id() or "-"
        if self.json:
            line = orjson.dumps({"time": stamp, "level": level, "logger": name,
                                 "pid": self.pid if logging.logProcesses else None,
                                 "request_id": request_id,
                                 "message": message, **fields}, default=str).decode()
        else:
            line = f"{stamp} {level} {name} [{request_id}]: {message}"
        # Under the handler's lock: a thread's record (emit) may be taking the pending lines.
        with self.lock:  # type: ignore[union-attr]
            pending = self._pending
            pending.append(line + self.terminator)
            first = len(pending) == 1
        if first:
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop in this thread: now
                self.flush()

    def emit(self, record: logging.LogRecord) -> None:
        if self._pending:
            self._write_pending()
        super().emit(record)

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            if self._pending:
                self._write_pending()
            super().flush()

    def _write_pending(self) -> None:
        lines, self._pending = self._pending, []
        try:
            self.stream.write("".join(lines))
        except Exception:  # logging's own rule: a failed write never raises
            self.handleError(logging.makeLogRecord({"msg": "%d access lines",
                                                    "args": (len(lines),)}))


def _call(method: weakref.WeakMethod[Any]) -> None:
    bound = method()
    if bound is not None:
        bound()


def access_writer(log: logging.Logger) -> LineHandler | None:
    """The proxy's own handler when it alone would write `log`'s INFO lines as installed
    (no filter on `log`, no other handler on the way to the root), else None: plain logging.
    The caller has checked `log.isEnabledFor(INFO)`."""
    if log.filters:
        return None
    found: LineHandler | None = None
    current: logging.Logger | None = log
    while current is not None:
        handlers = current.handlers
        if handlers:
            if found is not None or len(handlers) != 1 or \
                    not isinstance(handlers[0], LineHandler):
                return None
            found = handlers[0]
        if not current.propagate:
            break
        current = current.parent
    return found if found is not None and found.writes_alone() else None


def configure_logging(level: str, fmt: str = "text", stream: IO[str] | None = None) -> None:
    """Replace the root logger's handlers with one writing `fmt` lines to stderr."""
    handler = LineHandler(stream or sys.stderr, fmt)
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, LineHandler):
            old.flush()  # its pending access lines first
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
