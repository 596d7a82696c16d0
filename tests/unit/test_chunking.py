"""core/vectors/chunking.py: `iter_chunks` (one chunk's words at a time, not the file's) cuts
exactly the chunks the list-based cutter did, on any whitespace, bound and overlap."""

from __future__ import annotations

import random

from proxy.core.vectors.chunking import chunk_text, iter_chunks, word_tokens


def reference(text: str, max_tokens: int, overlap: int) -> list[str]:
    """The old cutter, which held every word of the file as a list."""
    words = text.split()
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
        back, kept = end, 0
        while back > start + 1 and kept + costs[back - 1] <= overlap:
            back -= 1
            kept += costs[back]
        start = back
    return chunks


def test_streamed_chunks_are_the_chunks_of_the_whole_word_list() -> None:
    rnd = random.Random(38)
    spaces = [" ", "\n", "\t", "\u00a0", "\u2003", "\x1c", " \r\n "]
    for _ in range(2000):
        n = rnd.randrange(0, 300)
        text = "".join("x" * rnd.choice([1, 3, 4, 5, 9, 17, 40, 200]) + rnd.choice(spaces)
                       for _ in range(n))
        max_tokens = rnd.choice([1, 2, 5, 20, 100])
        overlap = rnd.choice([0, 1, 2, max_tokens // 2])
        assert list(iter_chunks(text, max_tokens, overlap)) == \
            reference(text, max_tokens, overlap)
    assert chunk_text("  \n ") == []
