"""The kinds the store keeps beside responses and conversations: uploaded files (`files.py`),
prompt templates (`prompts.py`), vector stores (`vectors.py`), the response cache (`cache.py`)
and the per-key lists they share (`listing.py`)."""
