"""A bare uvicorn (no proxy app) on the protocol process/headtimeout.py makes for `--http NAME`,
for tests of the head deadline on each protocol uvicorn may pick: any request is answered 200
with the size of the body it read, so a test sees whole exchanges on one connection."""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn

from proxy.process.headtimeout import protocol_for


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = str(size).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--http", default="auto")
    parser.add_argument("--header-timeout", type=float, default=1.0)
    parser.add_argument("--keep-alive", type=float, default=5.0)
    args = parser.parse_args()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning",
                http=protocol_for(args.http, args.header_timeout),
                timeout_keep_alive=args.keep_alive)


if __name__ == "__main__":
    main()
