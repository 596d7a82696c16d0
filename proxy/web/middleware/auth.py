"""Bearer-key authentication and tenancy: the check the front middleware runs (front.py).

Every `/v1/` request gets a tenant in `scope["state"]["tenant"]`: a digest of its key, so stored
objects (and per-key limits, services/metering/limits.py) are scoped to the key that made them and
no key is ever stored. The keys are `--api-key`s and the `--keys-file`'s. With keys configured, a
missing or unknown key is a 401; the comparison runs over every configured key in constant time.
Without keys the proxy is open, and a client that sends a key anyway is still scoped by it.
WebSocket handshakes on `/v1/` are checked the same way; a refused one is closed before accept.

An open proxy is also guarded against browsers (core/policy/origin.py): a WebSocket handshake from a
foreign `Origin` is refused (403), and the request is marked `open` in its state, so a handler
that reads a JSON body refuses one not declared JSON (web/incoming.py `json_body`).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.core.errors import Forbidden, Unauthorized
from proxy.core.policy.origin import origin_allowed, parse_origin
from proxy.core.policy.tenancy import PUBLIC_TENANT, tenant_of
from proxy.services.admin.keyring import KeyRing
from proxy.web.errors import error_response

__all__ = ["OPEN", "PUBLIC_TENANT", "Auth", "bearer", "key_accepted", "tenant_of"]

log = logging.getLogger("proxy.web")

OPEN = "open"  # scope["state"] flag: no key was required (auth off)


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None


def bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            text: str = value.decode("latin-1")
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


def key_accepted(keys: Sequence[bytes], token: str) -> bool:
    """`token` is one of `keys`, compared in constant time over every key."""
    candidate = token.encode()
    matched = False
    for key in keys:  # no early exit: timing does not tell which key (or how many)
        matched |= hmac.compare_digest(candidate, key)
    return matched


class Auth:
    """The check the front middleware (web/middleware/front.py) runs on every `/v1/` request and
    WebSocket handshake. `ring`: the keys managed live too (services/admin/keyring.py); with it,
    a key is required when any is configured or the admin key is set, and the admin key is
    refused."""

    def __init__(self, keys: Sequence[str] = (), allow_origins: Sequence[str] = (),
                 ring: KeyRing | None = None) -> None:
        self._ring = ring or KeyRing(keys)
        self._origins = frozenset(o for o in map(parse_origin, allow_origins) if o is not None)

    def _accepts(self, token: str) -> bool:
        # The ring's lists: a keys file reloaded on SIGHUP applies to the next request.
        return key_accepted(self._ring.static_encoded, token) or \
            self._ring.accepts_managed(token)

    def refusal(self, scope: Scope) -> ASGIApp | None:
        """What answers a request (or handshake) refused, or None: then the caller's tenant
        (and whether the proxy is open) is in `scope["state"]`. Paths outside `/v1/` are not
        checked."""
        if not scope["path"].startswith("/v1/"):
            return None
        socket = scope["type"] == "websocket"
        keys = self._ring.required  # a key is required: read once (two property calls)
        token = bearer(scope)
        if token is not None and self._ring.is_admin(token):
            # The operator's key runs the admin API only: a leaked client config holding it
            # would otherwise serve (and bill) as an unlimited tenant.
            return _refuse_handshake if socket else error_response(
                Forbidden("The admin key cannot call the API; use a client key."))
        if keys and socket:
            if token is None or not self._accepts(token):
                # Refused at the handshake, before accept: uvicorn answers it with HTTP 403.
                return _refuse_handshake
        elif keys:
            if token is None:
                return error_response(Unauthorized(
                    "You didn't provide an API key. Send it as `Authorization: Bearer KEY`."))
            if not self._accepts(token):
                return error_response(Unauthorized("Incorrect API key provided."))
        elif socket and not origin_allowed(
                header(scope, b"origin"), header(scope, b"host"), self._origins):
            log.info("websocket handshake refused: foreign origin %.100r",
                     header(scope, b"origin"))
            return _refuse_handshake  # uvicorn: HTTP 403
        state = scope.setdefault("state", {})
        state["tenant"] = tenant_of(token) if token else PUBLIC_TENANT
        state[OPEN] = not keys
        return None


async def _refuse_handshake(scope: Scope, receive: Receive, send: Send) -> None:
    """A refused handshake: closed with 1008 (policy violation) before it is accepted."""
    await send({"type": "websocket.close", "code": 1008})
