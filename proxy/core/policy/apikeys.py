"""Client keys managed live through the admin API (docs/contract.md "Operating it"). Pure:
the record, its validation and its hashing; store/apikeys.py keeps the records, and
services/admin/keyring.py turns them (with the keys file's) into what auth and limits read.

A managed key's secret is shown once, when it is created, and never stored: the record holds
its SHA-256. A keyed or slow (password) hash buys nothing here: the secret is 256 random bits,
so nobody can search for it from its digest, and the digest must be computable on every
request by every instance without a shared secret. The tenant (core/policy/tenancy.py) is derived
from the same digest, so a managed key scopes its stored objects exactly as a file key does.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from proxy.core.errors import InvalidRequest
from proxy.core.policy.keysfile import LIMIT_FIELDS, STORE_FIELDS, Limits

SECRET_PREFIX = "sk-live-"
ID_PREFIX = "key_"
# What a create or an update may set: the keys file's per-key fields, and an expiry.
EDITABLE = ("name", *LIMIT_FIELDS, "priority", "cache_group", "expires_at")
MAX_NAME = 200


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def new_key_id() -> str:
    return ID_PREFIX + secrets.token_hex(12)


def secret_digest(secret: str) -> str:
    """The digest a managed key is stored and found by (hex SHA-256 of the secret)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def tenant_of_digest(digest: str) -> str:
    """The same tenant core/policy/tenancy.py `tenant_of` gives the secret."""
    return "k" + digest[:24]


@dataclass(frozen=True)
class ManagedKey:
    id: str
    name: str
    digest: str  # secret_digest(secret); the secret itself is never kept
    created_at: int
    rpm: int | None = None
    tpm: int | None = None
    max_streams: int | None = None
    token_budget: int | None = None
    max_stored_bytes: int | None = None
    priority: bool = False
    cache_group: str | None = None
    expires_at: int | None = None  # unix seconds; refused from then on

    @property
    def tenant(self) -> str:
        return tenant_of_digest(self.digest)

    @property
    def limits(self) -> Limits:
        return Limits(**{name: getattr(self, name) for name in LIMIT_FIELDS})

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def public(self) -> dict[str, Any]:
        """The key object the admin API answers with: everything but the digest."""
        out = {"id": self.id, "object": "api_key"}
        out.update({k: v for k, v in asdict(self).items() if k not in ("id", "digest")})
        return out

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ManagedKey:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def __repr__(self) -> str:  # the digest identifies the key: keep it out of logs
        return f"ManagedKey(id={self.id!r}, name={self.name!r})"


def created(body: Mapping[str, Any], *, now: float | None = None) -> tuple[ManagedKey, str]:
    """A new key from an admin create body, and its secret (to show once)."""
    if "name" not in body:
        raise InvalidRequest("Missing required parameter: 'name'.", param="name")
    secret = new_secret()
    base = ManagedKey(new_key_id(), "", secret_digest(secret),
                      int(time.time() if now is None else now))
    return edited(base, body), secret


def edited(key: ManagedKey, body: Mapping[str, Any]) -> ManagedKey:
    """`key` with the fields of an admin create/update body; null clears a limit. Every bad
    field is a 400 naming it."""
    if not isinstance(body, Mapping):
        raise InvalidRequest("The body must be a JSON object.")
    changes: dict[str, Any] = {}
    for name, value in body.items():
        if name not in EDITABLE:
            raise InvalidRequest(f"Unknown parameter: '{name}' (known: {', '.join(EDITABLE)}).",
                                 param=name)
        changes[name] = _checked(name, value)
    return replace(key, **changes)


def _checked(name: str, value: Any) -> Any:
    if name == "name":
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
            raise InvalidRequest(f"'name' must be a non-empty string of at most {MAX_NAME} "
                                 "characters.", param=name)
        return value.strip()
    if name == "priority":
        if not isinstance(value, bool):
            raise InvalidRequest("'priority' must be true or false.", param=name)
        return value
    if name == "cache_group":
        if value is not None and (not isinstance(value, str) or not value.strip()
                                  or len(value) > MAX_NAME):
            raise InvalidRequest("'cache_group' must be a non-empty string or null.",
                                 param=name)
        return value.strip() if isinstance(value, str) else None
    if value is None:
        return None
    least = 0 if name in STORE_FIELDS else 1
    if name == "expires_at":
        least = 0
    # bool is an int in Python: `rpm: true` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < least or value >= 2**62:
        what = "a non-negative" if least == 0 else "a positive"
        raise InvalidRequest(f"'{name}' must be {what} integer or null.", param=name)
    return value
