"""The web layer: HTTP and WebSocket in, events and JSON out.

Routes (`routes_*.py`, `websocket.py`) turn a request into a service call and a service's
result into a response; pure ASGI middleware (auth, access log, body limits, limiting,
draining, tracing, accounting) wraps them; `rendering.py` and `eventstream.py` write JSON and
server-sent events; `errors.py` maps errors to OpenAI-shaped bodies.

May import: `proxy.services`, `proxy.core`, the settings (limits it enforces) and telemetry
(metrics, tracing); never the store or the upstream adapters directly. Today `state.py` and
`websocket.py` still read the whole `Runtime` (a listed exception in tests/unit/test_layers.py,
until web gets a typed state of its own).
"""
