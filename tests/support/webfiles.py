"""A static web server on 127.0.0.1 for tests that make the proxy fetch something (input_file
URLs): each path answers its (content type, body), any other path a 404."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextlib.contextmanager
def static_server(bodies: dict[str, tuple[str, bytes]], seen: list[str] | None = None
                  ) -> Iterator[str]:
    """The server's base URL (`http://127.0.0.1:<port>`) while the block runs; the paths asked
    for are appended to `seen`."""
    asked = [] if seen is None else seen

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            kind, body = bodies.get(self.path, ("text/plain", b""))
            self.send_response(200 if self.path in bodies else 404)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
