"""What one request carries through every layer without being passed by hand: its context
(`requestctx.py`: its id, the replica that served it) and a client's W3C trace context
(`tracecontext.py`)."""
