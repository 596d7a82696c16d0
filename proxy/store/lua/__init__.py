"""The Lua scripts (`scripts.py`), how events are packed into their arguments (`packing.py`)
and how their replies become objects (`decoding.py`)."""
