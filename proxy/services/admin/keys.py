"""The admin API's key operations (docs/contract.md "Operating it"): each a store write,
then a refresh of this process's key ring so the instance that answered applies the change at
once (the others within the ring's bound)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.core.errors import NotFound, ProxyError
from proxy.core.policy.apikeys import ManagedKey, created, edited
from proxy.services.admin.keyring import KeyRing
from proxy.store.apikeys import ManagedKeyStore


class KeysUnavailable(ProxyError):
    status = 404
    type = "invalid_request_error"


def _store(ring: KeyRing) -> ManagedKeyStore:
    if ring.store is None:
        raise KeysUnavailable("Key management is not enabled.")
    return ring.store


def _missing(key_id: str) -> NotFound:
    return NotFound(f"No key with id '{key_id[:64]}'.", param="key_id")


async def create_key(ring: KeyRing, body: Mapping[str, Any]) -> dict[str, Any]:
    key, secret = created(body)
    await _store(ring).put(key)
    await ring.refresh()
    return {**key.public(), "key": secret}  # the secret, this once


async def list_keys(ring: KeyRing) -> list[ManagedKey]:
    _version, keys = await _store(ring).all()
    return keys


async def get_key(ring: KeyRing, key_id: str) -> ManagedKey:
    key = await _store(ring).get(key_id)
    if key is None:
        raise _missing(key_id)
    return key


async def update_key(ring: KeyRing, key_id: str, body: Mapping[str, Any]) -> ManagedKey:
    key = edited(await get_key(ring, key_id), body)
    if not await _store(ring).update(key):
        raise _missing(key_id)
    await ring.refresh()
    return key


async def revoke_key(ring: KeyRing, key_id: str) -> dict[str, Any]:
    if not await _store(ring).delete(key_id):
        raise _missing(key_id)
    await ring.refresh()
    return {"id": key_id, "object": "api_key.deleted", "deleted": True}
