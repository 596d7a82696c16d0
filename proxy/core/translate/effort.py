"""`reasoning.effort` as a model's vLLM can take it.

Clients (Codex) send `none`, `minimal` and `xhigh`; gpt-oss's chat template knows only `low`,
`medium` and `high` in every vLLM version (anything else: a 400, or a KeyError deep in the
template), and vLLM 0.10 validates `reasoning_effort` against those three for every model. A
value the model cannot take goes as the nearest one it can, on the scale below; a tie goes to
the higher effort (the client asked for at least that much thought). A model the table does not
know gets the value as is. The fleet file's `reasoning_efforts` overrides the table per replica
(services/fleet/fleet.py `Fleet.efforts`). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# Every value `reasoning.effort` accepts, least to most thought.
SCALE = ("none", "minimal", "low", "medium", "high", "xhigh")
GPT_OSS = ("low", "medium", "high")
# (a fragment of the served model's lowercased name, the efforts it takes), first match wins.
DEFAULTS: tuple[tuple[str, tuple[str, ...]], ...] = (("gpt-oss", GPT_OSS),)


def model_efforts(model: str) -> tuple[str, ...] | None:
    """The efforts `model` takes by default; None: any (the value goes as is)."""
    name = model.lower()
    return next((efforts for fragment, efforts in DEFAULTS if fragment in name), None)


def nearest(effort: str, accepted: Iterable[str]) -> str:
    """`effort`, or the accepted value closest to it on `SCALE` (ties: the higher)."""
    accepted = [a for a in accepted if a in SCALE]
    if effort in accepted or not accepted or effort not in SCALE:
        return effort
    where = SCALE.index(effort)
    return min(accepted, key=lambda a: (abs(SCALE.index(a) - where), -SCALE.index(a)))


def fit_effort(chat: dict[str, Any], accepted: tuple[str, ...] | None) -> dict[str, Any]:
    """The chat request with its `reasoning_effort` one `accepted` holds (None: as it is)."""
    effort = chat.get("reasoning_effort")
    if effort is not None and accepted is not None:
        chat["reasoning_effort"] = nearest(effort, accepted)
    return chat
