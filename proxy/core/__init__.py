"""The core: what the proxy means, without I/O.

Pure code a test calls with values: the wire types and errors, request parsing and
validation, Responses <-> Chat Completions translation, the event assembler, tool and hosted
tool descriptions, ids, sealing, tenancy and URL policy, vector search and chunking, cache and
fleet decisions. No sockets, no Redis, no clock it does not take as an argument.

May import: the standard library, third-party libraries and `proxy.core` itself; nothing else
of the proxy (checked by tests/unit/test_layers.py, which holds the layer table).
"""
