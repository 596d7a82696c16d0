"""`reasoning.effort` as a model's vLLM can take it.

Clients (Codex) send `none`, `minimal` and `xhigh`; gpt-oss's chat template knows only `low`,
`medium` and `high` in every vLLM version (anything else: a 400, or a KeyError deep in the
template), and vLLM 0.10 validates `reasoning_effort` against those three for every model. A
value the model cannot take goes as the nearest one it can, on the scale below; a tie goes to
the higher effort (the client asked for at least that much thought). A model the table does not
know gets the value as is. A replica whose `/version` says 0.10 or older takes only those three
whatever the model (`version_efforts`). The fleet file's `reasoning_efforts` overrides both per
replica (services/fleet/fleet.py `Fleet.efforts`). Pure.
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


def version_efforts(version: str | None) -> tuple[str, ...] | None:
    """The efforts a vLLM of `version` (its `/version` string) validates for every model: v0.10
    and older take only low/medium/high; None: no limit of its own (or not a vLLM version)."""
    if not version:
        return None
    parts = version.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1].split("+")[0].split("rc")[0])
    except (ValueError, IndexError):
        return None
    if (major, minor) == (0, 0):  # a build without a version (the simulator's generic one)
        return None
    return GPT_OSS if (major, minor) <= (0, 10) else None


def both(first: tuple[str, ...] | None, second: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The efforts two limits both take (None: no limit), in `SCALE` order."""
    if first is None or second is None:
        return first if second is None else second
    return tuple(e for e in SCALE if e in first and e in second) or first


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
