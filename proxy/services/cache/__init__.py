"""The response cache, as a service: Responses lookups, writes and hits served as this
request's answer (`responses.py`), chat completions through the cache (`chat.py`)."""
