"""The simulated answer, decided whole before the first byte is sent, without I/O: the
request's directives, the persona, the tool calls and search turns, the planned tokens as
deltas and logprobs (`script.py` puts them together)."""
