"""The upstream adapters: how the proxy talks HTTP to the outside.

    client.py   `Upstream`: requests to a replica, errors mapped where they happen
    pool.py     the connection pool per replica
    http1.py    the HTTP/1.1 connection (httptools parses the responses)
    dial.py     opening a connection (TCP, TLS)
    egress.py   connections to URLs a client named: resolved once, the vetted address dialled

May import: `proxy.core`, `proxy.settings`, `proxy.telemetry` (tests/unit/test_layers.py).
"""
