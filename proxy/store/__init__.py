"""The store: where responses, conversations, files, vectors, jobs and leases are kept.

`base.py` is the `Store` protocol, `redis.py` its one implementation (`conversations.py` its
conversation half); `connection/factory.py` opens it on the URL it is given: a real Redis (one
primary, Sentinel or Cluster, as core/storage/topology.py reads the URL) or, with no URL, the
embedded store (an in-process fakeredis server, one process). Every key and TTL is named in
`keys.py`, every Lua script in `lua/scripts.py`.

    connection/  reaching Redis: factory, reconnect, failures, replication, cluster
                 shards, pipelined script calls (coalesce)
    lua/         the scripts, how their arguments are packed and their replies decoded
    budget/      the per-key storage ledger, its cluster view, this process's headroom
    objects/     the other kinds kept: files, prompts, vectors, the response cache, listings
    jobqueue.py, leases.py, limits.py, fleetsecret.py  the queue, writers' leases, limit
                 counters, the fleet secret

May import: `proxy.core` (the records it stores), the standard library and third-party
libraries; never services, web or adapters (checked by tests/unit/test_layers.py).
"""
