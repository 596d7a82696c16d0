"""A document's text cut into overlapping chunks by tokens, for a vector store (OpenAI's static
strategy: at most `max_tokens` per chunk, `overlap` tokens shared by neighbours; 800/400 by
default). Pure.

Tokens are counted locally, not by the fleet's `/tokenize`: a word is ceil(len/4) tokens, at
least one (BPE tokenizers average about four characters of English per token). It never splits
a word and needs no round trip per file; a chunk may run a little over or under the model's own
count, which only moves where a chunk ends (docs/BENCHMARKS.md "Vector stores" has the figures).

`iter_chunks` reads the text word by word and holds one chunk's words at a time (ingestion
embeds a batch as it comes): a whole file's words as a list cost ~10x its text.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator

# What str.split() splits on: the same Unicode whitespace.
_WORD = re.compile(r"\S+")

DEFAULT_MAX_TOKENS = 800
DEFAULT_OVERLAP = 400
# OpenAI's bounds on a static strategy.
MIN_TOKENS, MAX_TOKENS = 100, 4096


def word_tokens(word: str) -> int:
    return max(1, (len(word) + 3) // 4)


def chunk_text(text: str, max_tokens: int = DEFAULT_MAX_TOKENS,
               overlap: int = DEFAULT_OVERLAP) -> list[str]:
    """The chunks, in order; none for a text with no words. Each chunk after the first starts
    where its predecessor's last `overlap` tokens start."""
    return list(iter_chunks(text, max_tokens, overlap))


def iter_chunks(text: str, max_tokens: int = DEFAULT_MAX_TOKENS,
                overlap: int = DEFAULT_OVERLAP) -> Iterator[str]:
    """`chunk_text`'s chunks one at a time, holding only the current chunk's words."""
    words = (match.group() for match in _WORD.finditer(text))
    window: deque[tuple[str, int]] = deque()  # the current chunk's words and their costs
    used = 0
    word = next(words, None)
    while word is not None:
        cost = word_tokens(word)
        if window and used + cost > max_tokens:
            yield " ".join(w for w, _ in window)
            used = _keep_overlap(window, overlap)
            continue
        window.append((word, cost))
        used += cost
        word = next(words, None)
    if window:
        yield " ".join(w for w, _ in window)


def _keep_overlap(window: deque[tuple[str, int]], overlap: int) -> int:
    """Drop the chunk's words but its last `overlap` tokens (always at least one word, so
    chunks move forward); the tokens kept."""
    keep, kept = 0, 0
    for _, cost in reversed(window):
        if keep == len(window) - 1 or kept + cost > overlap:
            break
        keep += 1
        kept += cost
    for _ in range(len(window) - keep):
        window.popleft()
    return kept
