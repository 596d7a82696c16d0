"""`python -m bench.serverlaunch SERVER serve ...`: the proxy's own `serve`, under another ASGI
server, for `bench/servers.py` to measure side by side with today's.

    uvicorn          what `serve` runs today: uvicorn with its defaults, httptools + uvloop
    uvicorn-h11      uvicorn's pure-Python HTTP/1.1 parser (h11) instead of httptools
    uvicorn-asyncio  uvicorn on the standard asyncio loop instead of uvloop
    granian          granian's ASGI interface (Rust: hyper + tokio, one runtime thread), its
                     embedded server in this process on a uvloop loop (one worker)
    granian-rloop    the same on rloop (granian's author's Rust event loop)

The app is built exactly as `serve` builds it (settings from the same flags and environment,
`create_app`, `tune_for_serving`); only the server around it changes. One process, so the
bench's `/proc/<pid>/stat` counts everything (granian's Rust threads included). SIGTERM drains
(the app's own drain: /readyz 503, streams finish within `--shutdown-grace`) and then stops the
server, as `serve` does. Not a supported way to run the proxy: granian needs `pip install granian`
(and `rloop` for granian-rloop); neither is a dependency.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

SERVERS = ("uvicorn", "uvicorn-h11", "uvicorn-asyncio", "granian", "granian-rloop")

# uvicorn.Config overrides per variant (cli.uvicorn_config keeps the rest as `serve` sets it)
_UVICORN: dict[str, dict[str, str]] = {
    "uvicorn": {},
    "uvicorn-h11": {"http": "h11"},
    "uvicorn-asyncio": {"loop": "asyncio"},
}


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if name == "granian-rloop":
        import rloop  # type: ignore[import-not-found, import-untyped, unused-ignore]

        factory: Callable[[], asyncio.AbstractEventLoop] = rloop.new_event_loop
        return factory
    import uvloop

    return uvloop.new_event_loop


def _serve_granian(name: str, app: Any, host: str, port: int,
                   drain: Callable[[], Any]) -> None:
    from granian.constants import Interfaces  # type: ignore[import-not-found, unused-ignore]
    from granian.server.embed import Server  # type: ignore[import-not-found, unused-ignore]

    server = Server(app, address=host, port=port, interface=Interfaces.ASGI,
                    websockets=True, log_enabled=False, backlog=2048)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopping: list[asyncio.Task[None]] = []

        async def drain_then_stop() -> None:
            try:
                await drain()
            finally:
                server.stop()  # type: ignore[no-untyped-call, unused-ignore]

        def on_signal() -> None:
            if stopping:  # a second signal: stop at once
                server.stop()  # type: ignore[no-untyped-call, unused-ignore]
                return
            stopping.append(loop.create_task(drain_then_stop()))

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        await server.serve()

    with asyncio.Runner(loop_factory=_loop_factory(name)) as runner:
        runner.run(main())


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] not in SERVERS or args[1] != "serve":
        print(f"usage: python -m bench.serverlaunch {{{','.join(SERVERS)}}} serve [flags]",
              file=sys.stderr)
        return 2
    name = args[0]
    from proxy import cli
    from proxy.app import app_runtime, create_app
    from proxy.process.gctune import tune_for_serving
    from proxy.process.server import DrainingServer
    from proxy.settings import build_settings, require_upstreams

    parsed = cli._parser().parse_args(args[1:])
    settings = build_settings(vars(parsed), os.environ)
    cli._configure_logging(settings.server.log_level, settings.server.log_format)
    require_upstreams(settings, "serve")
    app = create_app(settings)
    tune_for_serving()
    if name.startswith("granian"):
        _serve_granian(name, app, settings.server.host, settings.server.port,
                       lambda: app_runtime(app).drain())
        return 0
    config = cli.uvicorn_config(app, settings, **_UVICORN[name])
    DrainingServer(config, drain=lambda: app_runtime(app).drain()).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
