"""The routes, one module per API (`responses.py`, `conversations.py`, `files.py`,
`prompts.py`, `vector_stores.py`, `passthrough.py`: chat completions and models, `health.py`),
and `websocket.py`, the WebSocket mode of `/v1/responses`. Each reads the request, calls one
service method and renders its result."""
