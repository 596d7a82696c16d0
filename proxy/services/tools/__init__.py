"""The tools the proxy runs for the model between two upstream turns (the tool loop,
services/generation/toolloop.py, calls them):

    hosted.py      `HostedTools`: one runner per hosted kind (core/hosted.py), vetting, tracing
    mcpclient.py   the MCP client (the `mcp` SDK): `mcp` tools, and hosted kinds an operator's
                   MCP server serves
    websearch.py   web_search against the operator's search endpoint
    filesearch.py  file_search over the key's vector stores

May import what a service may (tests/unit/test_layers.py): `proxy.core`, `proxy.store`, the
settings groups, the adapters (egress) and telemetry.
"""
