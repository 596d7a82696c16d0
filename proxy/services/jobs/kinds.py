"""What a queue entry is: the kind its spec names.

The queue carries two kinds of job on one stream: a background response (its spec a `JobSpec`,
services/generation/spec.py) and a vector store file's ingestion (services/vectors/ingest.py).
Each spec says which it is in its `kind` key; the entry's id is only an id. Entries queued by
the previous release still read: its ingestion specs already named their kind, and its response
specs, which named none, are responses (the default).
"""

from __future__ import annotations

import orjson

from proxy.services.generation.spec import KIND as RESPONSE


def kind_of(spec: bytes) -> str:
    """The job kind `spec` names; `RESPONSE` when it names none (or is unreadable: the response
    path reports an unreadable spec and leaves the entry for a worker that reads it)."""
    try:
        data = orjson.loads(spec)
    except orjson.JSONDecodeError:
        return RESPONSE
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else RESPONSE
