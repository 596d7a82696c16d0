"""The fleet file (`--fleet FILE`, env `PROXY_FLEET`): the replicas of a larger fleet, one entry
each, in JSON or YAML (YAML is a superset of JSON, so one loader reads both):

    - url: http://10.0.0.5:8000       # required, as --upstream takes it
      name: gpu-5                     # optional, unique: the replica's label on /metrics
      weight: 2                       # > 0, default 1: share of un-keyed traffic and of the bound
      api_key: sk-replica-5           # sent upstream to this replica instead of --upstream-api-key
      max_concurrency: 64             # requests at once on this replica (flow control's cap)
      models: [qwen3-8b]              # serve only these, even before discovery
      reasoning_efforts: [low, medium, high]  # the reasoning.effort values its vLLM takes
                                      # (others go as the nearest; default: by model,
                                      # core/translate/effort.py)

A replica's address is the operator's: the public `/metrics` shows its `name`, or `replica-<n>`
(its position, counting from 1) when it has none. A top-level `{"replicas": [...]}` is accepted
too. Every mistake is a ConfigError naming the flag and the field (`--fleet: replicas[2].weight:
...`), never a traceback. The api key is kept out of every message and of `repr`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from proxy.core.translate.effort import SCALE

FLAG = "--fleet"
_FIELDS = frozenset({"url", "name", "weight", "api_key", "max_concurrency", "models",
                     "reasoning_efforts"})


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    url: str
    weight: float = 1.0
    api_key: str | None = field(default=None, repr=False)
    max_concurrency: int | None = None
    models: tuple[str, ...] | None = None
    name: str | None = None  # None: `replica-<n>` (services/fleet/fleet.py)
    reasoning_efforts: tuple[str, ...] | None = None  # None: the model's default table


class FleetFileError(ValueError):
    """A bad fleet file; settings turns it into a ConfigError naming `--fleet`."""


def load_fleet(path: str, normalize: Callable[[str, str], str]) -> tuple[ReplicaSpec, ...]:
    """Read and check the file; `normalize(url, flag)` is settings' URL check (it raises its
    own ConfigError, which the caller lets through)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise FleetFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise FleetFileError(f"{path} is neither JSON nor YAML{line}") from None
    if isinstance(data, dict) and set(data) == {"replicas"}:
        data = data["replicas"]
    if not isinstance(data, list) or not data:
        raise FleetFileError("expected a non-empty list of replicas (or {replicas: [...]})")
    specs = tuple(_replica(entry, f"replicas[{i}]", normalize) for i, entry in enumerate(data))
    seen: set[str] = set()
    names = {f"replica-{i + 1}": i for i, spec in enumerate(specs) if spec.name is None}
    for i, spec in enumerate(specs):
        if spec.url in seen:
            raise FleetFileError(f"replicas[{i}].url: {spec.url} is listed twice")
        seen.add(spec.url)
        if spec.name is not None and names.setdefault(spec.name, i) != i:
            raise FleetFileError(f"replicas[{i}].name: {spec.name!r} is taken")
    return specs


def _replica(entry: Any, where: str,
             normalize: Callable[[str, str], str]) -> ReplicaSpec:
    if isinstance(entry, str):
        entry = {"url": entry}
    if not isinstance(entry, dict):
        raise FleetFileError(f"{where}: expected an object with a url")
    unknown = sorted(str(k) for k in entry if k not in _FIELDS)
    if unknown:
        raise FleetFileError(f"{where}.{unknown[0]}: unknown field (known: "
                             f"{', '.join(sorted(_FIELDS))})")
    url = entry.get("url")
    if not isinstance(url, str) or not url:
        raise FleetFileError(f"{where}.url: required, a replica's root URL")
    return ReplicaSpec(
        url=normalize(url, f"{FLAG}: {where}.url"),
        weight=_weight(entry.get("weight", 1), f"{where}.weight"),
        api_key=_api_key(entry.get("api_key"), f"{where}.api_key"),
        max_concurrency=_cap(entry.get("max_concurrency"), f"{where}.max_concurrency"),
        models=_models(entry.get("models"), f"{where}.models"),
        name=_name(entry.get("name"), f"{where}.name"),
        reasoning_efforts=_efforts(entry.get("reasoning_efforts"),
                                   f"{where}.reasoning_efforts"),
    )


def _name(value: Any, where: str) -> str | None:
    """A label value: short, printable, and not a URL (the point of a name is to hide it)."""
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= 64 or not value.isprintable() \
            or "://" in value:
        raise FleetFileError(f"{where}: expected a short name (1-64 printable characters, "
                             "not a URL)")
    return value


def _weight(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value <= 0:
        raise FleetFileError(f"{where}: expected a number > 0")
    return float(value)


def _api_key(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or any(c in value for c in "\r\n"):
        raise FleetFileError(f"{where}: expected a non-empty string on one line")
    return value


def _cap(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FleetFileError(f"{where}: expected an integer >= 1")
    return value


def _models(value: Any, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value \
            or not all(isinstance(m, str) and m for m in value):
        raise FleetFileError(f"{where}: expected a non-empty list of model names")
    return tuple(value)


def _efforts(value: Any, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(v in SCALE for v in value):
        raise FleetFileError(f"{where}: expected a non-empty list of {', '.join(SCALE)}")
    return tuple(value)
