"""A vLLM OpenAI-server simulator: the upstream for tests, the demo and the benchmark.

`create_app(SimConfig(...))` is an ASGI app that answers like vLLM's OpenAI server (chunk
format, errors, model list, embeddings) with deterministic, steerable answers. The behaviours a
test can steer are documented in docs/SIMULATOR.md.

Layout (a pure core with the I/O at the edge):
    config      SimConfig
    tokens      the word tokenizer and prompt accounting
    request     body -> ChatRequest (vLLM's validation)
    answer/     the answer, decided before the first byte (pure):
      directives  `[[sim key=value]]` parsing
      personas    what one model family at one vLLM version sends
      schema      JSON schema -> a deterministic instance
      tools       which tool calls to make; searching: the search tools' turns
      script      ChatRequest -> Plan (tokens, finish, failure)
      deltas, logprobs  planned tokens as stream deltas, their logprobs
    wire        Plan -> vLLM's chunks / completion object; model list
    embeddings  vectors and the embeddings response; tokenize: `/tokenize`
    prefixcache the replica's prefix cache
    stats       counters behind /sim/stats
    app         the ASGI app: routes, pacing, disconnects

May import: nothing of the proxy (the standard library and third-party libraries only). It
stands in for vLLM: sharing the proxy's code would let one bug hide on both sides of the wire
(checked by tests/unit/test_layers.py).
"""

from proxy.simulator.app import create_app
from proxy.simulator.config import SimConfig

__all__ = ["SimConfig", "create_app"]
