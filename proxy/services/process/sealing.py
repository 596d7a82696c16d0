"""The process's `Sealer` (core/seal.py): which secret seals and opens this deployment's blobs.

- `--fleet-secret` given: those secrets (the first seals, every one opens: rotation).
- none given: one random secret per deployment. The first instance to start keeps 32 random
  bytes in the store (store/fleetsecret.py) and every instance and worker reads the same ones at
  start, so a blob sealed anywhere in the deployment opens everywhere in it. With the embedded
  store (one process) that is a random secret per process: blobs handed out before a restart
  are refused afterwards (400 `invalid_encrypted_content`), as the responses stored then are
  gone too.
There is no public default: a secret anyone can read lets anyone seal blobs we accept (a
forged compaction item would become system text).

A store unreachable at start does not stop the process (`store: false` traffic goes on while
Redis is down, docs/operations.md): the sealer starts without a secret, every request that
needs one (a blob to check, `include: ["reasoning.encrypted_content"]`, a compaction) is a 503
`store_unavailable`, and `keep_reading` reads it as soon as the store answers.
"""

from __future__ import annotations

import asyncio
import logging
import secrets

from proxy.core.errors import StoreUnavailable
from proxy.core.seal import Sealer
from proxy.settings import SealingSettings
from proxy.store.fleetsecret import SecretRead

log = logging.getLogger("proxy")

SECRET_BYTES = 32
# Seconds between reads of the shared secret while the store is unreachable.
RETRY_SECONDS = 2.0


async def fleet_sealer(settings: SealingSettings, read: SecretRead, *,
                      shared: bool) -> Sealer:
    """The operator's secrets, else the deployment's (read once here; pending when the store
    does not answer: `keep_reading` then). `shared`: the store is Redis, not embedded."""
    given = settings.secrets()
    sealer = Sealer(given, settings.max_bytes)
    if given:
        return sealer
    try:
        await _read(sealer, read)
    except StoreUnavailable:
        log.warning("no --fleet-secret and the store is unreachable: sealed content is refused "
                    "(503) until the deployment's fleet secret can be read")
        return sealer
    where = "kept in Redis" if shared else "this process only"
    log.info("no --fleet-secret: sealed blobs use the deployment's random secret (%s)", where)
    return sealer


async def keep_reading(sealer: Sealer, read: SecretRead, *,
                       interval: float = RETRY_SECONDS) -> None:
    """Until the deployment's secret is read (a loop of `Runtime.start`, cancelled at exit)."""
    while not sealer.ready:
        try:
            await _read(sealer, read)
            log.info("the deployment's fleet secret was read from the store")
        except StoreUnavailable:
            await asyncio.sleep(interval)


async def _read(sealer: Sealer, read: SecretRead) -> None:
    sealer.secrets = (await read(secrets.token_bytes(SECRET_BYTES)),)
