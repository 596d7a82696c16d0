"""The response cache's pure parts: the exact key and the semantic namespace (`key.py`), the
vectors' buckets and cosine (`vectors.py`), a chat stream folded into one completion and
streamed again (`completion.py`)."""
