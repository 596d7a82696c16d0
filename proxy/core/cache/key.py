"""What a cached answer is keyed on: pure functions of the request, no I/O.

- `exact`: sha256 of the tenant, the route and the canonical JSON (sorted keys) of everything that
  shapes the answer. For `/v1/responses` that is the chat request we send upstream (model, the
  full message list after `previous_response_id` / `conversation` expansion and `instructions`,
  tools, tool choice, response format, reasoning effort, sampling parameters) plus what shapes
  the Response object beyond it (`include`, `reasoning.summary`, `text`); for
  `/v1/chat/completions` the client's body. Only `stream` and `stream_options` are left out, so
  one entry serves stream and non-stream clients. Anything else we do not know stays in: an
  unknown sampling parameter makes a different key, never a wrong hit.
- `namespace`: the same hash with the last user message blanked out (its position kept). A
  semantic lookup only compares requests of one namespace: same tenant, route, model, system
  prompt, earlier turns, tools and parameters; only the last question may differ.
- `guard`: the last user message's numbers, negations and quoted strings. Embeddings score a
  question and its negation, or two questions that differ in one number, as near-identical; a
  semantic hit also needs an equal guard.

Deliberate: keys are digests, so nothing of a prompt appears in a Redis key.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import orjson

ROUTE_RESPONSES = "responses"
ROUTE_CHAT = "chat"

# The longest last user message the semantic side takes (longer: exact only). Past an
# embedding model's context a question is not embedded whole anyway, and the guard scans it on
# the event loop: linear, but 16 MiB of it is a second; 32 Ki chars is milliseconds.
MAX_QUERY_CHARS = 32 * 1024
# Fields that choose the transport, not the answer: one entry serves both.
_TRANSPORT = ("stream", "stream_options")


@dataclass(frozen=True, slots=True)
class Directives:
    """The request's `Cache-Control`: `no-cache` skips the lookup, `no-store` the write."""

    lookup: bool = True
    write: bool = True


# A request without `Cache-Control`: look up and write.
USE_CACHE = Directives()


def parse_cache_control(value: str | None) -> Directives:
    if not value:
        return USE_CACHE  # (frozen: the one default serves every request without the header)
    tokens = {part.strip().lower().split("=", 1)[0] for part in value.split(",")}
    return Directives(lookup="no-cache" not in tokens, write="no-store" not in tokens)


@dataclass(frozen=True, slots=True)
class CacheKey:
    exact: str
    # None when the last user message is not plain text (or there is none), or is longer than
    # MAX_QUERY_CHARS: exact only.
    namespace: str | None = None
    query: str = ""  # the last user message's text, what the semantic side embeds
    guard: str = ""


def responses_material(chat: dict[str, Any], *, include: tuple[str, ...],
                       reasoning: dict[str, Any] | None,
                       text: dict[str, Any]) -> dict[str, Any]:
    """What keys a `/v1/responses` answer: the upstream chat request and the Response-only
    fields that change the output items (encrypted reasoning, summaries, the format echo)."""
    material = _without_transport(chat)
    material["~responses"] = {"include": sorted(include), "reasoning": reasoning, "text": text}
    return material


def chat_material(body: dict[str, Any]) -> dict[str, Any]:
    return _without_transport(body)


def cache_key(tenant: str, route: str, material: dict[str, Any]) -> CacheKey:
    exact = _digest(tenant, route, material)
    messages = material.get("messages")
    index = _last_user(messages) if isinstance(messages, list) else None
    if index is None:
        return CacheKey(exact)
    assert isinstance(messages, list)
    query = _text_of(messages[index].get("content"))
    if not query or len(query) > MAX_QUERY_CHARS:
        return CacheKey(exact)
    blanked = list(messages)
    blanked[index] = {"role": "user", "content": None}
    namespace = _digest(tenant, route, {**material, "messages": blanked})
    return CacheKey(exact, namespace, query, guard_of(query))


def _without_transport(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in _TRANSPORT}


def _digest(tenant: str, route: str, material: dict[str, Any]) -> str:
    canonical = orjson.dumps(material, option=orjson.OPT_SORT_KEYS)
    h = hashlib.sha256()
    h.update(tenant.encode())
    h.update(b"\0")
    h.update(route.encode())
    h.update(b"\0")
    h.update(canonical)
    return h.hexdigest()


def _last_user(messages: list[Any]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            return index
    return None


def _text_of(content: Any) -> str:
    """Plain text, or text-only parts joined; anything else (images, files) is not embedded."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts: list[str] = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") not in ("text", "input_text"):
            return ""
        texts.append(str(part.get("text", "")))
    return "".join(texts)


# -- the near-miss guard ------------------------------------------------------------------------

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SMALL_NUMBERS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty",
)
_NUMBER_WORDS = {word: str(value) for value, word in enumerate(_SMALL_NUMBERS)} | {
    "thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70",
    "eighty": "80", "ninety": "90", "hundred": "100", "thousand": "1000",
    "million": "1000000", "billion": "1000000000", "half": "0.5", "twice": "2x",
    "double": "2x", "triple": "3x",
}
# Matched with apostrophes removed ("don't" -> "dont"); any other "...n't" counts too.
_NEGATIONS = frozenset((
    "not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "nowhere", "without",
    "cannot", "cant", "dont", "doesnt", "didnt", "isnt", "arent", "wasnt", "werent", "wont",
    "wouldnt", "shouldnt", "couldnt", "hasnt", "havent", "hadnt", "mustnt", "neednt", "aint",
))
_WORD = re.compile("[a-z]+(?:['\u2019][a-z]+)?")
# Quote kinds: opener → (closer, whether it must stand outside a word on both sides, as an
# apostrophe inside "don't" is no quote). Scanned, not matched by a regex: an alternation of
# `open([^close]*)close` retries from every opener that has no closer, which is quadratic
# (30,000 unclosed \u201c froze the event loop for 18 s).
_QUOTES = {'"': ('"', False), "\u201c": ("\u201d", False), "`": ("`", False),
           "'": ("'", True), "\u2018": ("\u2019", True)}


def quoted_strings(text: str) -> list[str]:
    """The quoted strings of `text`, left to right, non-overlapping: each opener's quote ends
    at the first closer after it (for the word-bound kinds only when that closer is not
    followed by a word character; else the opener is no quote). Linear: the position of the
    next closer of each kind is looked up once and reused until the scan passes it."""
    out: list[str] = []
    next_closer: dict[str, int] = {}  # closer → its next position (-1: none left)
    i, end = 0, len(text)
    while i < end:
        char = text[i]
        kind = _QUOTES.get(char)
        if kind is None or (kind[1] and i > 0 and _is_word(text[i - 1])):
            i += 1
            continue
        closer, bounded = kind
        at = next_closer.get(closer, i)
        if 0 <= at <= i:
            at = text.find(closer, i + 1)
            next_closer[closer] = at
        if at < 0 or (bounded and at + 1 < end and _is_word(text[at + 1])):
            i += 1
            continue
        out.append(text[i + 1:at])
        i = at + 1
    return out


def _is_word(char: str) -> bool:
    """`\\w` of Python's `re` on str patterns."""
    return char.isalnum() or char == "_"


def guard_of(text: str) -> str:
    """A signature of what an embedding blurs: numbers (digits, and number words read as
    digits) in order, how many negations, and the quoted strings in order (case kept)."""
    lowered = text.lower()
    words = [w.replace("\u2019", "'") for w in _WORD.findall(lowered)]
    numbers = [m.group(0).replace(",", "") for m in _NUMBER.finditer(text)]
    numbers += [_NUMBER_WORDS[w] for w in words if w in _NUMBER_WORDS]
    negations = sum(1 for w in words if w.replace("'", "") in _NEGATIONS or w.endswith("n't"))
    quoted = quoted_strings(text)
    return orjson.dumps([numbers, negations, quoted]).decode()
