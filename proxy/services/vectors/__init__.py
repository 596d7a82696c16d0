"""Vector stores and file_search: the REST service (`stores.py`), ingestion as a background job
(`ingest.py`, embeddings from services/fleet/embeddings.py), search with a per-process cache of
stores' vectors (`search.py`); the file_search runner over them is services/tools/filesearch.py."""
