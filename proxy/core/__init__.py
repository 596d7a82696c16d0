"""The core: what the proxy means, without I/O.

Pure code a test calls with values: the wire types and errors, request parsing and
validation, Responses <-> Chat Completions translation, the event assembler, tool and hosted
tool descriptions, ids, sealing, tenancy and URL policy, vector search and chunking, cache and
fleet decisions. No sockets, no Redis, no clock it does not take as an argument.

    types, errors, ids  the leaves every module reads
    request/     a client's request, read and validated     translate/  Responses -> chat
    events/      the event assembler, SSE, replay           tools/      tool names, custom
    context/     what one request carries (ids, trace)                  input, citations
    policy/      who may do what: keys, tenancy, budgets,   vectors/    chunking, search,
                 origins, URLs                                          filters, stores
    cache/, fleet/  the response cache's and the fleet's decisions
    storage/     which Redis a `--redis-url` names (topology)
    hosted, mcp, filesearch, websearch, compaction, documents, prompts, seal, shardtags

May import: the standard library, third-party libraries and `proxy.core` itself; nothing else
of the proxy (checked by tests/unit/test_layers.py, which holds the layer table).
"""
