"""Who may call `/admin/` and read `/console` data: the operator's `--admin-key`, only.

Off without `--admin-key`: every admin path is a 404, as if it did not exist. A client key is a
403 (valid, for another surface), anything else a 401. Every admin call is logged with the
admin identity (a short digest of the admin key: which key, never the key) and its method and
path; never a body, so no prompt reaches the log.
"""

from __future__ import annotations

import hashlib
import logging

from starlette.requests import Request

from proxy.core.errors import Forbidden, NotFound, Unauthorized
from proxy.services.admin.keyring import KeyRing
from proxy.web.middleware.auth import bearer
from proxy.web.state import state_of

log = logging.getLogger("proxy.admin")


def ring_of(request: Request) -> KeyRing:
    return state_of(request).keys


def admin_identity(token: str) -> str:
    return "admin-" + hashlib.sha256(token.encode()).hexdigest()[:8]


def require_admin(request: Request) -> str:
    """The admin identity of the caller, or the refusal (404 / 401 / 403)."""
    ring = ring_of(request)
    if not ring.admin_enabled:
        raise NotFound(f"Not found: {request.url.path[:100]}")
    token = bearer(request.scope)
    if token is None:
        raise Unauthorized("The admin API needs the admin key: `Authorization: Bearer KEY`.")
    if not ring.is_admin(token):
        if ring.accepts(token):
            raise Forbidden("A client key cannot call the admin API.")
        raise Unauthorized("Incorrect admin key provided.")
    identity = admin_identity(token)
    log.info("admin call by %s: %s %s", identity, request.method, request.url.path[:200])
    return identity
