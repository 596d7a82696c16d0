"""Reaching Redis: which one a URL names (core/storage/topology.py), the client opened on it
(`factory.py`), what a failure becomes (`failures.py`), retries (`reconnect.py`), `WAIT` for
replicas (`replication.py`), a cluster's shard tags for new ids (`shards.py`) and script calls
sent together (`coalesce.py`)."""
