"""Object ids in OpenAI's styles (`resp_…`, `msg_…`, `rs_…`, `fc_…`, `call_…`, `conv_…`).

Random, URL-safe, 48 hex characters after the prefix like OpenAI's. Code that must be
deterministic (the assembler, tests) takes an `IdFactory` instead of calling `new_id` itself.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

IdFactory = Callable[[str], str]

RESPONSE = "resp"
MESSAGE = "msg"
REASONING = "rs"
FUNCTION_CALL = "fc"
CALL = "call"
FUNCTION_CALL_OUTPUT = "fco"
CUSTOM_TOOL_CALL = "ctc"
CUSTOM_TOOL_CALL_OUTPUT = "ctco"
CONVERSATION = "conv"
ADDITIONAL_TOOLS = "at"


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def counter_ids() -> IdFactory:
    """Deterministic ids (`msg_1`, `msg_2`, `fc_1`, …) for tests and golden files."""
    counts: dict[str, int] = {}

    def make(prefix: str) -> str:
        counts[prefix] = counts.get(prefix, 0) + 1
        return f"{prefix}_{counts[prefix]}"

    return make
