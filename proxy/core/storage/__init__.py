"""What the proxy knows of where it keeps things, without I/O: which Redis a `--redis-url`
names and how it is reached (`topology.py`), read alike by the settings' check at start and by
the store that opens it (store/connection/factory.py)."""
