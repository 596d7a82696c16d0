"""A fake SearXNG for tests and `make run` demos: its JSON API, on 127.0.0.1 only.

    python -m tests.support.searx --port N

    GET /search?q=...&format=json   {"query", "results": [{"url", "title", "content"} x 3]}
                                    (made from the query, so a test can predict them)
    GET /fail?q=...                 HTTP 500
    GET /slow?q=...                 sleeps 30 s, then answers as /search (a search that times out)
    GET /garbage?q=...              200 with a body that is not JSON
    GET /queries                    every `q` received so far, in order (what a test checks the
                                    proxy sent)
    GET /health                     200
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


def results_for(query: str) -> list[dict[str, str]]:
    """The three results any query gets; the first one's content starts with a sentence the
    simulated model quotes (docs/SIMULATOR.md)."""
    slug = "-".join(query.lower().split())[:40] or "empty"
    return [{"url": f"https://example.org/{slug}/{n}",
             "title": f"Result {n} about {query}",
             "content": f"Fact {n} from example.org is well documented. It is about {query}"}
            for n in (1, 2, 3)]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.queries: list[str] = []
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        params = parse_qs(parts.query)
        query = (params.get("q") or [""])[0]
        if parts.path in ("/search", "/fail", "/slow", "/garbage"):
            with self.server.lock:
                self.server.queries.append(query)
        if parts.path == "/health":
            self._send(200, {"ok": True})
        elif parts.path == "/queries":
            with self.server.lock:
                self._send(200, list(self.server.queries))
        elif parts.path == "/fail":
            self._send(500, {"error": "engine down"})
        elif parts.path == "/garbage":
            self._raw(200, b"<html>not json</html>", "text/html")
        elif parts.path in ("/search", "/slow"):
            if parts.path == "/slow":
                time.sleep(30)
            if (params.get("format") or [""])[0] != "json":
                self._send(403, {"error": "format=json required"})  # as SearXNG without it
                return
            self._send(200, {"query": query, "number_of_results": 3,
                             "results": results_for(query)})
        else:
            self._send(404, {"error": "not found"})

    def _send(self, status: int, body: Any) -> None:
        self._raw(status, json.dumps(body).encode(), "application/json")

    def _raw(self, status: int, data: bytes, kind: str) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client gave up (a timed-out search)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    _Server(args.port).serve_forever()


if __name__ == "__main__":
    main()
