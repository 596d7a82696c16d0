"""responses-proxy: an OpenAI Responses API server in front of a vLLM fleet.

The rooms, bottom to top (each may import only the rooms below it; tests/unit/test_layers.py
holds the table and checks every import, including those in functions and TYPE_CHECKING):

    core/        what the proxy means, without I/O                   -> nothing of the proxy
    settings/    the frozen settings, from flags and environment     -> core
    store/       the memory and Redis stores                         -> core
    telemetry/   metrics, tracing, logs                              -> core, settings
    upstream/    adapters: the HTTP client, its pool, dialling, egress -> core, settings,
                                                                        telemetry
    services/    what the proxy does                                 -> core, settings, store,
                                                                        adapters, telemetry
    web/         routes and middleware                               -> services, core,
                                                                        settings, telemetry
    runtime.py, app.py  the composition root                         -> everything above
    cli.py, __main__.py, process/ (server, prefork, worker, gctune, headtimeout)
                 entry points and the process around the app         -> everything
    simulator/   a vLLM stand-in for tests and benchmarks            -> nothing of the proxy

This module holds only the version, which every room may read.
"""

__version__ = "0.1.0"
