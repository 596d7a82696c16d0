"""The services: what the proxy does, one subpackage per concern, I/O through what they are given.

    responses   create, retrieve, cancel, delete, input items, conversations, prompts
    generation  one generation: the upstream turns, the tool loop
    tools       the tools the proxy runs for the model: MCP, web_search, file_search
    eventlog    the stored event stream: writing, following, replaying, ending
    jobs        background responses: the queue's runner and per-key shares
    fleet       the replicas: discovery, admission, routing, passthrough, media
    cache       the response cache (exact and semantic)
    files       uploaded files
    vectors     vector stores: ingestion, search
    metering    token metering and per-key limits
    process     what a process runs beside requests: loops, drain, sealing keys

May import: `proxy.core`, `proxy.store`, the settings groups, the adapters (upstream, egress)
and telemetry; never `proxy.web`, the composition root or the entry points
(checked by tests/unit/test_layers.py).
"""
