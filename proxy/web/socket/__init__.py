"""The WebSocket mode's connection, behind the route (web/routes/websocket.py: the handshake,
the key's socket bound, the connection's life): `connection.py` reads frames and hands each
to the handler of its type, sends frames one at a time and keeps the connection's memory of
chains; `lanes.py` runs the responses of one lane (`stream_id`) in order, each lane beside the
others, a steered response's successor first (steering, `response.steer`: the connection's
services/responses/steering.py)."""
