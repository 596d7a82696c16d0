"""Which replica takes a request: a pure function of the replicas' states and the request's key.

Inputs are snapshots (`Candidate`), so the choice is tested without a fleet, a clock or I/O, and
the services that add admission control or benchmarks call the very same function.

- **Load** (`Candidate.load`) is one number per replica, the same on every proxy instance up to
  its own live requests (services/fleet/fleet.py builds it):
      requests = in_flight (this process, live)
               + max(0, running + waiting - in_flight at the last scrape)  (everybody else)
      load     = requests * (1 + kv_cache_usage)
  `running`, `waiting` and `kv_cache_usage` come from the replica's own `/metrics`; a replica
  without them counts only this process's requests. A full KV cache doubles the weight of the
  requests a replica holds (vLLM then queues or preempts).
- **Un-keyed** requests go to the replica with the least load per unit of weight. Ties (an idle
  fleet, sequential traffic) go to the replica with the fewest picks per unit of weight
  (`Candidate.picks`, stride scheduling), then by `turn` rotation: never always the first one.
- **Keyed** requests (a chain's recorded replica, a conversation, a `prompt_cache_key`) walk
  their preference order: the recorded `home` replica first, then the key's weighted rendezvous
  order. The first replica whose load after taking the request stays within its bounded share,
      load + 1 <= ceil(factor * (sum load + 1) * weight / sum weight) + headroom,
  takes it (consistent hashing with bounded loads, Mirrokni et al. 2016). `headroom` (default
  `HEADROOM` requests) is our addition: vLLM batches, so one or two requests more than an idle
  peer are no overload, and a load figure up to one scrape stale (another instance's request
  that has ended since) must not split a chain on a quiet fleet. An overloaded target
  so sheds its keys to the next replica of each key's order: one stable fallback per key, and
  only while the overload lasts. With `factor` ≥ 1 some replica is always within bound; should
  rounding leave none, the least loaded takes it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

# Requests a keyed target may carry above its bounded share before it sheds (see above).
HEADROOM = 2


@dataclass(frozen=True, slots=True)
class Candidate:
    """One replica as the choice sees it (healthy and serving the model)."""

    url: str
    load: float = 0.0
    weight: float = 1.0
    picks: int = 0  # requests this process has sent it (the tie-breaker's memory)


def _unit(key: str, url: str) -> float:
    """A uniform number in (0, 1) from the pair: the rendezvous hash."""
    digest = hashlib.blake2b(f"{key}|{url}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 1) / (2**64 + 1)


def rendezvous_order(candidates: Sequence[Candidate], key: str) -> list[Candidate]:
    """The key's preference order (weighted rendezvous hashing: score = -weight / ln u). With
    equal weights this is the order of the plain hash; a replica leaving moves only its keys."""
    return sorted(candidates, key=lambda c: -c.weight / math.log(_unit(key, c.url)),
                  reverse=True)


def within_bound(candidate: Candidate, candidates: Sequence[Candidate], factor: float,
                 headroom: int = HEADROOM) -> bool:
    total = sum(c.load for c in candidates)
    weights = sum(c.weight for c in candidates)
    bound = math.ceil(factor * (total + 1) * candidate.weight / weights) + headroom
    return candidate.load + 1 <= bound


def least_loaded(candidates: Sequence[Candidate], turn: int = 0) -> Candidate:
    n = len(candidates)
    return min(
        enumerate(candidates),
        key=lambda ic: (ic[1].load / ic[1].weight, ic[1].picks / ic[1].weight,
                        (ic[0] - turn) % n),
    )[1]


def choose(candidates: Sequence[Candidate], *, key: str | None = None, home: str | None = None,
           factor: float = 1.25, turn: int = 0, headroom: int = HEADROOM) -> Candidate:
    """The replica for one request. `candidates` is not empty; `key` the affinity key (or
    None), `home` the URL of the replica that served the request's predecessor (or None),
    `factor` the allowed overload over the mean, `turn` a counter the caller advances."""
    if key is None and home is None:
        return least_loaded(candidates, turn)
    order = rendezvous_order(candidates, key) if key is not None else list(candidates)
    if home is not None:
        order.sort(key=lambda c: c.url != home)  # stable: the rest keep the key's order
    for candidate in order:
        if within_bound(candidate, candidates, factor, headroom):
            return candidate
    return least_loaded(candidates, turn)
