"""A document's text cut into overlapping chunks by tokens, for a vector store (OpenAI's static
strategy: at most `max_tokens` per chunk, `overlap` tokens shared by neighbours; 800/400 by
default). Pure.

Tokens are counted locally, not by the fleet's `/tokenize`: a word is ceil(len/4) tokens, at
least one (BPE tokenizers average about four characters of English per token). It never splits
a word and needs no round trip per file; a chunk may run a little over or under the model's own
count, which only moves where a chunk ends (docs/BENCHMARKS.md "Vector stores" has the figures).
"""

from __future__ import annotations

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
    words = text.split()
    if not words:
        return []
    costs = [word_tokens(w) for w in words]
    chunks: list[str] = []
    start = 0
    while start < len(words):
        end, used = start, 0
        while end < len(words) and (used + costs[end] <= max_tokens or end == start):
            used += costs[end]
            end += 1
        chunks.append(" ".join(words[start:end]))
        if end == len(words):
            break
        # Back up from the end over `overlap` tokens, always moving forward at least a word.
        back, kept = end, 0
        while back > start + 1 and kept + costs[back - 1] <= overlap:
            back -= 1
            kept += costs[back]
        start = back
    return chunks
