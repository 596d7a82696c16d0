"""The web layer: HTTP and WebSocket in, events and JSON out.

Routes (`routes/`, one module per API, the WebSocket mode in `routes/websocket.py` with its
connection and lanes in `socket/`) turn a request into a service call and a service's result
into a response; pure ASGI middleware
(`middleware/`: access log, tracing, accounting, draining, body limits, auth) wraps them;
`state.py` is everything they read (`WebState`: the services, the process's parts, the
settings groups), built by the composition root; `incoming.py` is what a handler takes from a
request, `limiting.py` its hook into the per-key limits; `rendering.py` and `eventstream.py`
write JSON and server-sent events; `errors.py` maps errors to OpenAI-shaped bodies.

May import: `proxy.services`, `proxy.core`, the settings (limits it enforces) and telemetry
(metrics, tracing); never the store, the upstream adapters or the composition root (checked by
tests/unit/test_layers.py).
"""
