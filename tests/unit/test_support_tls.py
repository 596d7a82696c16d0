"""tests/support/tls.py: the test process's httpx clients share one default TLS context, and a
client asking for anything else still gets it."""

from __future__ import annotations

import ssl
from typing import Any

import httpx
import httpx2
import openai

from tests.support.tls import TRANSPORTS, share_default_context, shared_default


def context_of(client: httpx.Client | httpx2.Client) -> ssl.SSLContext:
    transport: Any = client._transport
    context: ssl.SSLContext = transport._pool._ssl_context
    return context


def test_default_clients_share_one_context_made_once() -> None:
    made: list[ssl.SSLContext] = []

    def make(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
        made.append(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
        return made[-1]

    create = shared_default(make)
    first, second = create(), create(verify=True, cert=None, trust_env=True)
    assert first is second and made == [first]


def test_a_client_asking_for_its_own_verification_gets_its_own() -> None:
    calls: list[tuple[Any, Any, bool]] = []

    def make(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
        calls.append((verify, cert, trust_env))
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)

    create = shared_default(make)
    own = ssl.create_default_context()
    create(verify=own)
    create(verify=own)
    create(verify=False)
    create(trust_env=False)
    create(trust_env=False)
    assert calls == [(own, None, True), (own, None, True), (False, None, True),
                     (True, None, False)]


def test_the_suite_runs_with_it_installed() -> None:
    # tests/conftest.py installs it: every default client of this process (httpx's own, the
    # SDK's) gets the one context, a client with its own context keeps it.
    installed = [module.create_ssl_context for module in TRANSPORTS]  # type: ignore[attr-defined]
    assert all(getattr(create, "shared", False) for create in installed)
    share_default_context()  # idempotent: not wrapped twice
    assert [module.create_ssl_context for module in TRANSPORTS] == installed  # type: ignore
    own = ssl.create_default_context()
    with httpx.Client() as a, httpx.Client() as b, httpx.Client(verify=own) as c, \
            httpx2.Client() as d, httpx2.Client() as e, \
            openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k") as sdk:
        assert context_of(a) is context_of(b)
        assert context_of(d) is context_of(e) is context_of(sdk._client)
        assert context_of(c) is own
        for shared in (context_of(a), context_of(d)):
            assert shared.verify_mode == ssl.CERT_REQUIRED and shared.check_hostname
