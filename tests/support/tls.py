"""One verifying TLS context per test process for every httpx client the tests make.

httpx builds a fresh verifying `ssl.SSLContext` for every client it makes, and loading the CA
certificates into it costs 35-90 ms of CPU (certifi's bundle for httpx, the system's for
httpx2, the HTTP client of the `openai` SDK and of `mcp`). The suite makes thousands of such
clients: every `httpx.get`/`post`/`stream` (each a client of its own), every readiness poll in
tests/support/servers.py, every SDK client, every `sim` reset. Counted in one `make test`
parallel run, httpx's alone: ~3,500 contexts, ~270 s of the two workers' time, while every one
of those clients talks plain http on loopback and never uses the context.

So the tests' process shares one: a client asking httpx for the default context (verify on,
no client certificate) gets the context made the first time. A client that brings its own
(`verify=<context>`, a CA path, `verify=False`, a certificate) still gets what it asked for.
Only the test process is changed: the servers the tests start (the proxy, the simulator) are
separate processes with their own httpx, and the proxy's own upstream client does not use
httpx at all (proxy/upstream/client.py).

Why a shared context is safe here: verification settings are the same for every such client
(the same CA file), and the only per-connection change httpcore makes to a context (its ALPN
list, set before a TLS handshake) concerns https connections, which no test opens through httpx.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable
from types import ModuleType
from typing import Any

import httpx2._transports.default
from httpx._transports import default as transports

# The modules whose transports call `create_ssl_context` by that name.
TRANSPORTS: tuple[ModuleType, ...] = (transports, httpx2._transports.default)

Factory = Callable[..., ssl.SSLContext]


def shared_default(make: Factory) -> Factory:
    """`make` (httpx's `create_ssl_context`) with its default answer made once."""

    @functools.cache
    def default(trust_env: bool) -> ssl.SSLContext:
        return make(verify=True, cert=None, trust_env=trust_env)

    def create(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
        if verify is True and cert is None:
            return default(trust_env)
        return make(verify=verify, cert=cert, trust_env=trust_env)

    create.shared = True  # type: ignore[attr-defined]
    return create


def share_default_context() -> None:
    """Installs `shared_default` where httpx's and httpx2's transports call it (idempotent).
    Raises if an upgrade moved the function: the suite would silently take minutes longer."""
    for module in TRANSPORTS:
        current = getattr(module, "create_ssl_context", None)
        if current is None:
            raise RuntimeError(f"{module.__name__}.create_ssl_context is gone: "
                               "update tests/support/tls.py")
        if not getattr(current, "shared", False):
            module.create_ssl_context = shared_default(current)  # type: ignore[attr-defined]
