"""The simulator's prefix cache: which part of a prompt this replica has seen recently.

A model of vLLM's automatic prefix caching, close enough for routing experiments:
  - the prompt is rendered as one token sequence (`prompt_sequence`) whose length equals the
    `usage.prompt_tokens` the simulator reports: the tools' JSON first (len // 4 pseudo-tokens),
    then per message `<|start|> role <|sep|> words... <|end|>`, then the reply header
    `<|start|> assistant <|sep|>`. Turn k+1 of a conversation therefore starts with turn k's
    whole sequence (its reply header is where the assistant message of turn k begins);
  - the sequence is cut into full blocks of `BLOCK_TOKENS` tokens; block i is known by a hash
    chained over every block before it (as vLLM's block hashes are), so a block hits only when
    the whole prefix up to and including it was seen; a partial last block is never cached;
  - hits are counted from the start until the first unknown block; the blocks of every prompt
    are then inserted (or refreshed) as most recently used; the cache holds at most
    `capacity` blocks and forgets the least recently used first.
  - a request's `cache_salt` seeds the chain (vLLM mixes it into the first block's hash), so
    prompts with different salts (or one with and one without) share no block at all.
Pure: no I/O, no clock. `app.py` turns the misses into prefill time.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.simulator.tokens import content_text

BLOCK_TOKENS = 16  # vLLM's default block size
DEFAULT_CAPACITY_BLOCKS = 4096


def prompt_sequence(messages: list[dict[str, Any]], tools: Any) -> list[str]:
    """The prompt as tokens; `len()` equals `tokens.prompt_tokens(messages, tools)`."""
    sequence: list[str] = []
    if tools:
        raw = orjson.dumps(tools).decode()
        sequence += [raw[i:i + 4] for i in range(0, (len(raw) // 4) * 4, 4)]
    for message in messages:
        sequence += ["<|start|>", str(message.get("role")), "<|sep|>"]
        sequence += content_text(message.get("content")).split()
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                sequence += str(function.get("name", "")).split()
                sequence += str(function.get("arguments", "")).split()
        sequence.append("<|end|>")
    sequence += ["<|start|>", "assistant", "<|sep|>"]
    return sequence


@dataclass(frozen=True)
class Lookup:
    hit_tokens: int
    miss_tokens: int


class PrefixCache:
    """An LRU of chained block hashes, at most `capacity` blocks."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY_BLOCKS,
                 block: int = BLOCK_TOKENS) -> None:
        if capacity < 0 or block < 1:
            raise ValueError("capacity must be >= 0 and block >= 1")
        self.capacity = capacity
        self.block = block
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def clear(self) -> None:
        self._blocks.clear()

    def admit(self, sequence: Sequence[str], salt: str | None = None) -> Lookup:
        """Count the cached prefix of `sequence`, then remember all its full blocks."""
        hashes = self._hashes(sequence, salt)
        hit_blocks = 0
        for digest in hashes:
            if digest not in self._blocks:
                break
            hit_blocks += 1
        for digest in hashes:
            self._blocks[digest] = None
            self._blocks.move_to_end(digest)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
        hit = hit_blocks * self.block
        return Lookup(hit_tokens=hit, miss_tokens=len(sequence) - hit)

    def _hashes(self, sequence: Sequence[str], salt: str | None) -> list[bytes]:
        out: list[bytes] = []
        parent = b"" if salt is None else b"salt\0" + salt.encode()
        for start in range(0, len(sequence) - self.block + 1, self.block):
            chunk = orjson.dumps(list(sequence[start:start + self.block]))
            parent = hashlib.blake2b(parent + chunk, digest_size=16).digest()
            out.append(parent)
        return out
