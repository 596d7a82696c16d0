"""Which tool calls the simulated model makes, and with what arguments. Pure.

Rules (in order):
  - no tools, tool_choice "none", or the last message is a tool result: no calls (the model
    answers the tool results in text);
  - a named tool_choice: that function; "required": the tools the user's text mentions, or the
    first tool;
  - "auto": the tools the user's text mentions by name (as a whole word), else the tools whose
    name or description words match the text's (`relevant`: "What's the weather like in San
    Francisco?" calls `get_weather`), or the first tool when a `tools=N` directive asks for
    calls; otherwise no calls;
  - `tools=N` makes exactly N calls, cycling through the offered tools from the first chosen one
    (a named tool_choice repeats its function); `tools=0` forces text in "auto" mode;
  - `parallel_tool_calls: false` keeps only the first call;
  - a `call=NAME` directive (with `call_args=JSON`) makes exactly that one call, when offered;
  - else a search tool (web or file, searching.py) is called with the user's question, unless
    the text names another tool or a `tools=N` directive decides.
Arguments are `json.dumps` of a schema instance (only its required properties with the
`args=required` directive) (vLLM's tool parsers re-serialise with json.dumps,
so `{"city": "sim"}` with its spaces, not the compact form).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from proxy.simulator.answer.schema import instance
from proxy.simulator.answer.searching import is_search_tool
from proxy.simulator.request import ChatRequest, Tool


@dataclass(frozen=True)
class Call:
    name: str
    arguments: str


def choose_calls(req: ChatRequest) -> list[Call]:
    if not req.tools or req.tool_mode == "none" or _answers_tool_results(req):
        return []
    named = req.directives.call
    if named is not None:  # `call=NAME`: that tool (when offered), once
        tool = next((t for t in req.tools if t.name == named), None)
        if tool is None:
            return []
        arguments = req.directives.call_args or json.dumps(
            instance(tool.parameters, req.hints, required_only=True))
        return [Call(tool.name, arguments)]
    search = _search(req)
    if search is not None:  # the user's question, as a model asks a search engine
        query = req.hints.get("query") or req.text
        return [Call(search.name, json.dumps({"query": query}))]
    chosen = _chosen(req)
    wanted = req.directives.tools
    if wanted is not None and req.tool_mode != "named":
        if wanted == 0 and req.tool_mode == "auto":
            return []
        start = req.tools.index(chosen[0]) if chosen else 0
        chosen = [req.tools[(start + i) % len(req.tools)] for i in range(wanted)]
    elif wanted is not None:
        chosen = chosen * wanted
    if not req.parallel_tool_calls:
        chosen = chosen[:1]
    hints = req.hints
    required_only = req.directives.args == "required"
    return [Call(tool.name, json.dumps(instance(tool.parameters, hints,
                                                required_only=required_only)))
            for tool in chosen]


def _search(req: ChatRequest) -> Tool | None:
    """A search tool (web or file) (searching.py) the model calls: offered, the mode lets it (auto,
    required, or named to it), no `tools=N` directive, and no other tool named in the text."""
    search = next((t for t in req.tools if is_search_tool(t)), None)
    if search is None or req.directives.tools is not None:
        return None
    if req.tool_mode == "named":
        return search if req.tool_name == search.name else None
    if any(_mentions(req.text, t.name) for t in req.tools if t is not search):
        return None
    return search


def _chosen(req: ChatRequest) -> list[Tool]:
    if req.tool_mode == "named":
        return [t for t in req.tools if t.name == req.tool_name][:1]
    mentioned = [t for t in req.tools if _mentions(req.text, t.name)]
    if mentioned:
        return mentioned
    if req.tool_mode == "auto":
        words = _words(req.text)
        relevant = [t for t in req.tools if relevant_to(t, words)]
        if relevant:
            return relevant
    if req.tool_mode == "required" or req.directives.tools:
        return [req.tools[0]]
    return []


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


# Words too common in tool names and descriptions to say what a tool is about.
GENERIC_WORDS = frozenset((
    "list", "tool", "tools", "fetch", "create", "update", "delete", "call", "make", "find",
    "read", "write", "show", "this", "that", "your", "will", "when", "what", "which", "with",
    "from", "into", "data", "info", "value", "values", "current", "given", "returns", "return",
    "please", "function", "like", "about", "some", "have", "there", "here",
))
# A prompt's `get_weathers` is one (unknown) identifier, not the word "weathers".
_WORD = re.compile(r"[a-z0-9_]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def relevant_to(tool: Tool, words: frozenset[str]) -> bool:
    """A model would pick `tool` for a prompt with these `words`: a word of its name (split on
    `_`, `-` and camelCase), or two words of its description, appear in the prompt. Words of
    three letters or fewer and generic ones (GENERIC_WORDS) do not count, nor does a plural
    "s" (weather/weathers)."""
    name_words = _words(_CAMEL.sub(" ", tool.name).replace("_", " "))
    if name_words & words:
        return True
    return len(_words(tool.description) & words) >= 2


def _words(text: str) -> frozenset[str]:
    return frozenset(w[:-1] if w.endswith("s") and len(w) > 4 else w
                     for w in _WORD.findall(text.lower())
                     if len(w) > 3 and w not in GENERIC_WORDS)


def _answers_tool_results(req: ChatRequest) -> bool:
    return bool(req.messages) and req.messages[-1].get("role") == "tool"
