"""Operating the proxy (issue 42): client keys managed live (`keyring.py`), a key's usage
(`usage.py`), and what the console reads (`console.py`)."""
