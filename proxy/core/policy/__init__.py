"""Who may do what, decided without I/O: the keys file (`keysfile.py`), a key's tenant
(`tenancy.py`), its storage budget (`storagebudget.py`), per-key slots (`keyslots.py`), what a
browser origin may do (`origin.py`) and which URLs an operator's prefixes admit
(`urlpolicy.py`)."""
