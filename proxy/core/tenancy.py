"""A client key's tenant: the digest that scopes its stored objects and its limits. The key
itself is never stored, logged or sent upstream; only this digest is."""

from __future__ import annotations

import hashlib

PUBLIC_TENANT = "public"


def tenant_of(key: str) -> str:
    return "k" + hashlib.sha256(key.encode()).hexdigest()[:24]
