"""What each client key holds in the store: the ledger (`ledger.py`), its per-tag view on a
cluster (`ledgerview.py`) and this process's last sight of it (`headroom.py`)."""
