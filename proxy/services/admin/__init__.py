"""Operating the proxy: client keys managed live (`keyring.py`), a key's usage
(`usage.py`), and what the console reads (`console.py`)."""
