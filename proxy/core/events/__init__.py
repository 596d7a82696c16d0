"""Responses stream events: how upstream chunks become them (`assembler/`, fed by
`chatstream.py`), how a final object becomes them again (`replay.py`), the reasoning summaries
(`summaries.py`), and their two wire forms: SSE (`sse.py`) and WebSocket frames
(`wsframe.py`; a client's `response.steer` and its answers: `steer.py`)."""
