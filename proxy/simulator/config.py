"""The simulator's configuration: what the CLI (`responses-proxy simulate`) can set.

Invariants: a `SimConfig` is immutable and every field has a default, so tests can build one with
only what they care about. Per-request directives (`[[sim ...]]`) override the timing fields for
one request; nothing here changes at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from proxy.simulator.answer import personas

ReasoningField = Literal["reasoning", "reasoning_content", "both"]

DEFAULT_MODELS = ("sim-model", "sim-reasoner")


@dataclass(frozen=True)
class SimConfig:
    token_delay_ms: float = 0.0
    ttft_ms: float = 0.0
    reasoning_field: ReasoningField = "reasoning"
    max_model_len: int = 32768
    models: tuple[str, ...] = DEFAULT_MODELS
    # The prefix cache (prefixcache.py): each prompt token it has not seen recently costs this
    # much prefill time before the first token (0: caching is counted but costs nothing), and it
    # remembers this many 16-token blocks.
    prefill_ms_per_token: float = 0.0
    prefix_cache_blocks: int = 4096
    # False: `tool_choice: "auto"` is refused, as by vLLM started without
    # --enable-auto-tool-choice (request.py).
    auto_tool_choice: bool = True
    # Real vLLM's shapes (personas.py): every served model behaves as this persona (None: a
    # served name matching a persona's pattern does, e.g. `Qwen/Qwen3-8B`), at this vLLM version
    # ("X.Y"; None: personas.DEFAULT_VERSION for a persona, no version effects otherwise).
    persona: str | None = None
    vllm_version: str | None = None
    # vLLM's --enable-prompt-tokens-details: usage's prompt_tokens_details (cached_tokens) on
    # every answer. Off, a persona or versioned model sends none; the generic model only with
    # the `cached=N` directive (as it always did).
    prompt_tokens_details: bool = False
    # vLLM's --max-logprobs: the most `top_logprobs` it serves (logprobs.py).
    max_logprobs: int = 20
    # The generic model (no persona, no version) as it was before it took vLLM 0.32's shapes
    # (personas.LEGACY): for the tests of those older shapes; no CLI flag.
    legacy_shapes: bool = False
    # The CLI passes `models` as `**{...}`, which mypy checks against every field not passed
    # explicitly: pass any new field explicitly there. Fixed knobs live next to their use
    # (embeddings.DEFAULT_DIM, script.REASONER_TOKENS, app.STALL_TIMEOUT_S,
    # stats.PROMPT_COUNTS_LIMIT, prefixcache.BLOCK_TOKENS).

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("the simulator needs at least one model")
        if self.token_delay_ms < 0 or self.ttft_ms < 0 or self.prefill_ms_per_token < 0:
            raise ValueError("delays must be >= 0")
        if self.max_model_len < 1:
            raise ValueError("max_model_len must be >= 1")
        if self.prefix_cache_blocks < 0:
            raise ValueError("prefix_cache_blocks must be >= 0")
        if self.persona is not None and self.persona not in personas.PERSONAS:
            raise ValueError(f"persona must be one of {', '.join(personas.PERSONAS)}")
        if self.vllm_version is not None:
            personas.parse_version(self.vllm_version)

    def persona_for(self, model: str) -> personas.Persona:
        """What `model` sends: its persona at the configured version."""
        version = personas.parse_version(self.vllm_version) if self.vllm_version else None
        return personas.resolve(personas.persona_of(model, self.persona), version,
                                prompt_details=self.prompt_tokens_details,
                                reasoner=is_reasoner(model), legacy=self.legacy_shapes)


def is_reasoner(model: str) -> bool:
    """A served name containing "reason" behaves as if vLLM ran it with a reasoning parser."""
    return "reason" in model.lower()
