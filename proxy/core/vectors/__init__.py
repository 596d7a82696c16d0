"""Vector stores' pure parts: their objects and fields (`stores.py`), a document cut into
chunks (`chunking.py`), exact cosine search (`search.py`) and attribute filters (`filters.py`);
numpy itself, imported at its first use (`lazynumpy.py`: why, there)."""
