"""A client key's tenant: the digest that scopes its stored objects and its limits. The key
itself is never stored, logged or sent upstream; only this digest is.

The tenant also partitions vLLM's prefix cache. A replica that finds a prompt's prefix cached
answers it much sooner (0.09 s instead of 1.9 s for a long system prompt), so a key that may
reuse another key's cached blocks can test guesses of that key's prompts by timing. vLLM's
`cache_salt` is mixed into the hash of a prompt's first block, and every later block hash
chains from it: requests with different salts share no cached block. So every upstream chat
request carries `cache_salt` = a digest of its tenant (`CacheSalts`):
  - the client never sees it and cannot set it: a client's own `cache_salt` (chat pass-through)
    is hashed together with ours, never used alone, so it partitions further within its key but
    cannot reach another key's partition (that would take a preimage of SHA-256);
  - no secret is needed: the salt only has to differ between tenants, and a digest of the tenant
    does; a keyed salt would need the same secret on every instance and worker, for no gain
    while nobody but the proxy talks to the replicas (a client that could reach vLLM directly
    could send any salt, or none, anyway);
  - keys that should share cached prompts (one team's keys, one agent's shards) name the same
    keys-file `cache_group`: a group's salt is a digest of its name, the same for all its keys;
  - with auth off every client is the one public tenant: one salt, sharing as before.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

from proxy.core.errors import InvalidRequest
from proxy.core.policy.keysfile import KeysFile

PUBLIC_TENANT = "public"

CACHE_SALT = "cache_salt"
# Domain separation: these digests mean nothing elsewhere (not a tenant id, not a cache key).
_SALT_DOMAIN = b"responses-proxy/cache_salt/v1\0"


def tenant_of(key: str) -> str:
    return "k" + hashlib.sha256(key.encode()).hexdigest()[:24]


def _digest(*parts: str) -> str:
    """43 characters of URL-safe base64 (256 bits): the form vLLM's docs suggest for a salt."""
    h = hashlib.sha256(_SALT_DOMAIN)
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode("ascii")


# Tenants whose salt is remembered, at most: the keys a process serves are far fewer; past it the
# memory starts over (a digest each is all a miss costs).
MAX_REMEMBERED = 4096


class CacheSalts:
    """Each tenant's `cache_salt`. `groups`: tenant → keys-file `cache_group`. A tenant's salt is
    made once and remembered (a SHA-256 and its base64 were ~5 µs of every create), until the
    keys change."""

    def __init__(self, groups: Mapping[str, str] | None = None) -> None:
        self._groups = dict(groups or {})
        self._made: dict[str, str] = {}

    @classmethod
    def of(cls, keys_file: KeysFile | None) -> CacheSalts:
        if keys_file is None:
            return cls()
        return cls({tenant_of(e.key): e.cache_group for e in keys_file.keys
                    if e.cache_group is not None})

    def set_groups(self, groups: Mapping[str, str]) -> None:
        """The keys changed (services/admin/keyring.py)."""
        self._groups = dict(groups)
        self._made = {}  # a key moved to or out of a group: its salt with it

    def salt(self, tenant: str) -> str:
        made = self._made.get(tenant)
        if made is not None:
            return made
        group = self._groups.get(tenant)
        made = _digest("group", group) if group is not None else _digest("tenant", tenant)
        if len(self._made) >= MAX_REMEMBERED:
            self._made = {}
        self._made[tenant] = made
        return made

    def salted(self, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
        """`body` (a chat request from a client) with the tenant's salt; a `cache_salt` the
        client sent is combined into it. Not a string or empty: 400, as vLLM answers."""
        ours = self.salt(tenant)
        theirs = body.get(CACHE_SALT)
        if theirs is None:
            return {**body, CACHE_SALT: ours}
        if not isinstance(theirs, str) or not theirs:
            raise InvalidRequest("Parameter 'cache_salt' must be a non-empty string if "
                                 "provided.", param=CACHE_SALT)
        return {**body, CACHE_SALT: _digest("client", ours, theirs)}
