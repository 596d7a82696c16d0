"""The baseline routing policies the benchmark compares affinity with (`--routing`).

Both ignore affinity keys. `round_robin` takes the replicas in turn; `least_loaded` takes the
one with the fewest requests in flight, ties broken by a rotating start (never by list order,
which would pile sequential traffic onto the first replica). Pure: the caller keeps `turn`.
"""

from __future__ import annotations

from collections.abc import Sequence

ROUND_ROBIN = "round_robin"
LEAST_LOADED = "least_loaded"


def baseline(policy: str, loads: Sequence[int], turn: int) -> int:
    """Index into `loads` (in-flight counts of the candidates, at least one) of the pick."""
    count = len(loads)
    if policy == ROUND_ROBIN:
        return turn % count
    if policy != LEAST_LOADED:
        raise ValueError(f"unknown routing policy {policy!r}")
    least = min(loads)
    return next(i for i in ((turn + k) % count for k in range(count)) if loads[i] == least)
