"""Dialing a replica: a TCP connection (TLS when the origin is https), directly or through an
HTTP proxy's `CONNECT` tunnel, bounded by one timeout; the connection speaks HTTP/1.1
(http1.py `Connection`) once this returns. Failures are http1's `ConnectError` /
`ConnectTimeout`, naming the address for the log (client.py keeps it out of client messages).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass

from proxy.upstream.http1 import MAX_HEAD_BYTES, ConnectError, Connection, ConnectTimeout, Origin


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP proxy to tunnel through with `CONNECT`; `authorization` is the whole
    `Proxy-Authorization` value, if any."""

    host: str
    port: int
    authorization: str | None = None


async def connect(origin: Origin, *, timeout: float,
                  ssl_context: ssl.SSLContext | None = None,
                  proxy: Proxy | None = None) -> Connection:
    """A new connection to `origin` (TLS with `ssl_context` for https), through `proxy`'s
    `CONNECT` tunnel when given."""
    scheme, host, port = origin
    loop = asyncio.get_running_loop()
    conn = Connection(origin, loop)
    tls = ssl_context if scheme == "https" else None
    via = f" via proxy {proxy.host}:{proxy.port}" if proxy is not None else ""
    try:
        async with asyncio.timeout(timeout):
            if proxy is None:
                await loop.create_connection(lambda: conn, host, port, ssl=tls,
                                             server_hostname=host if tls is not None else None)
            else:
                sock = await _tunnel(loop, proxy, host, port)
                try:
                    await loop.create_connection(
                        lambda: conn, sock=sock, ssl=tls,
                        server_hostname=host if tls is not None else None)
                except BaseException:
                    sock.close()
                    raise
    except TimeoutError as exc:  # before OSError: TimeoutError is one
        raise ConnectTimeout(f"no connection to {host}:{port}{via} within {timeout:g} s") \
            from exc
    except OSError as exc:  # refused, unreachable, DNS, TLS (ssl.SSLError is an OSError)
        raise ConnectError(f"cannot connect to {host}:{port}{via}: {exc}") from exc
    return conn


async def _tunnel(loop: asyncio.AbstractEventLoop, proxy: Proxy, host: str,
                  port: int) -> socket.socket:
    """A socket to `proxy` on which `CONNECT host:port` succeeded (nothing buffered past the
    proxy's answer: it sends nothing more until we speak)."""
    infos = await loop.getaddrinfo(proxy.host, proxy.port, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, address)
        target = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
        head = f"CONNECT {target} HTTP/1.1\r\nhost: {target}\r\n"
        if proxy.authorization:
            head += f"proxy-authorization: {proxy.authorization}\r\n"
        await loop.sock_sendall(sock, (head + "\r\n").encode("latin-1"))
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = await loop.sock_recv(sock, 4096)
            if not data or len(answer) > MAX_HEAD_BYTES:
                raise ConnectionError("the proxy closed the tunnel before answering")
            answer += data
        status_line = answer.split(b"\r\n", 1)[0].decode("latin-1")
        parts = status_line.split()
        if len(parts) < 2 or not parts[1].startswith("2"):
            raise ConnectionRefusedError(f"the proxy refused the tunnel: {status_line[:200]}")
    except BaseException:
        sock.close()
        raise
    return sock
