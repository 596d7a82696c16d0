"""Which sources an answer cites, as annotations on its text. Pure; runs once per answer (when
its text is whole), never per chunk.

The tool's output numbers what it found [1]..[n] and asks the model to cite by number, so:
  1. every `[n]` marker of a known source is a citation spanning the marker (`[1][2]` and
     `[1, 2]` both cite two);
  2. an answer with no marker still cites a source whose URL, title or one of its sentences it
     uses verbatim (a model that quotes rather than numbers), spanning the first such use;
  3. an answer with neither, after a file search, cites the first passage found at its end.
Sources come from `core/hosted.py` `Source`: the annotation a citation becomes is the source's
own (`url_citation` with url and title for web search) plus `start_index`/`end_index`
(character offsets in the text, end exclusive), or for an "index" source (file_citation) one
`index` where the citation ends; in the order they appear.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.core.hosted import Source

# The shortest text whose verbatim use counts as citing its source (shorter ones, such as a
# one-word title, are too likely to be a coincidence).
MIN_QUOTE = 12


def cite(text: str, sources: Sequence[Source]) -> list[dict[str, Any]]:
    if not sources or not text:
        return []
    by_number = {s.number: s for s in sources}
    spans = _markers(text, by_number)
    if not spans:
        spans = _quotes(text, sources)
    if not spans:
        spans = _file_fallback(text, sources)
    spans.sort(key=lambda span: span[0])
    return [{**source.annotation, "start_index": start, "end_index": end}
            if source.placement == "span" else {**source.annotation, "index": end}
            for start, end, source in spans]


def _markers(text: str, by_number: dict[int, Source]) -> list[tuple[int, int, Source]]:
    """`[n]` and `[n, m]` markers naming known sources."""
    out: list[tuple[int, int, Source]] = []
    start = text.find("[")
    while start != -1:
        end = text.find("]", start)
        if end == -1:
            break
        inside = [part.strip() for part in text[start + 1:end].split(",")]
        if inside and all(p.isdigit() and int(p) in by_number for p in inside):
            out += [(start, end + 1, by_number[int(p)]) for p in inside]
            start = text.find("[", end)
        else:
            start = text.find("[", start + 1)
    return out


def _file_fallback(text: str, sources: Sequence[Source]) -> list[tuple[int, int, Source]]:
    """An answer after a file search that neither numbers nor quotes a passage still cites the
    best one (the first found) at its end: the contract's "every answer after a search cites a
    file of the searched stores" holds whatever the model wrote."""
    first = next((s for s in sources if s.placement == "index"), None)
    return [] if first is None else [(len(text), len(text), first)]


def _quotes(text: str, sources: Sequence[Source]) -> list[tuple[int, int, Source]]:
    out: list[tuple[int, int, Source]] = []
    for source in sources:
        for quote in source.texts:
            if len(quote) < MIN_QUOTE:
                continue
            at = text.find(quote)
            if at != -1:
                out.append((at, at + len(quote), source))
                break
    return out


def sentences(text: str, limit: int = 8) -> tuple[str, ...]:
    """The first `limit` sentences of a text (split after `.`, `!`, `?`), stripped."""
    out: list[str] = []
    current: list[str] = []
    for word in text.split():
        current.append(word)
        if word[-1] in ".!?":
            out.append(" ".join(current))
            current = []
            if len(out) == limit:
                break
    if current and len(out) < limit:
        out.append(" ".join(current))
    return tuple(out)
