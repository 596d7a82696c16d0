"""The store: where responses, conversations, files, vectors, jobs and leases are kept.

`base.py` is the `Store` protocol, `redis.py` its one implementation; `factory.py` opens it on
the URL it is given: a real Redis (one primary, Sentinel or Cluster, `topology.py`) or, with
no URL, the embedded store (an in-process fakeredis server, one process). Every key, TTL and
Lua script is named in `keys.py` and `scripts.py`.

May import: `proxy.core` (the records it stores), the standard library and third-party
libraries; never services, web or adapters (checked by tests/unit/test_layers.py).
"""
