"""The process's one logging set-up: `text` (human) or `json` (one object per line, for log
pipelines), and the current request's id on every line (core/context/requestctx.py).

The id is added by a filter on the handler, so it covers every logger (ours, uvicorn's,
redis-py's) and is read when the line is written, in the request's own context. Log lines carry
no prompt or output text and no keys: no code path logs a body, and the access log
(web/middleware/access.py) logs a key only as a digest.
"""

from __future__ import annotations

import logging
import sys
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


def configure_logging(level: str, fmt: str = "text", stream: IO[str] | None = None) -> None:
    """Replace the root logger's handlers with one writing `fmt` lines to stderr."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
