"""`Headroom`: what this process's own writes last saw of each key's stored bytes, so that the
storage pre-check of a response's create (`check_storage(rechecked=True)`) can skip its round
trip for a key that was just seen well inside its budget. Only there: a file's, a prompt's or an
ingestion's write counts its bytes without refusing, so their checks always read.

Why it is safe: the pre-check is advisory. It refuses an over-budget key before any upstream
work (compaction, the turn); the create script checks the budget again, atomically, and writes
nothing past it (store/lua/scripts.py CREATE_RESPONSE). Skipping the pre-check can therefore only
let an over-budget request reach its replica before the create refuses it (the same 429, before
`response.created`), never store past the budget. Why it pays: every stored create paid that
round trip (and Redis's CPU) before its upstream call, ~1 in 2 of a stored stream's round trips
before its first event (tests/integration/test_create_round_trips.py).

Pure: the clock is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# A key seen this recently by this process's own create is trusted to be where it was: other
# processes' writes within a second are what the create's own check is for.
FRESH_S = 1.0
# Trusted only below this share of the budget: a key near its budget is checked every time.
MARGIN = 0.9
# Keys remembered at most (an open proxy scopes by any bearer a client sends: unbounded).
MAX_KEYS = 4096


@dataclass(slots=True)
class _Seen:
    held: int
    at: float


class Headroom:
    def __init__(self, clock: Callable[[], float], *, fresh_s: float = FRESH_S,
                 max_keys: int = MAX_KEYS) -> None:
        self._clock = clock
        self._fresh_s = fresh_s
        self._max_keys = max_keys
        self._seen: dict[str, _Seen] = {}

    def note(self, tenant: str, held: int) -> None:
        """`tenant` holds `held` bytes, as a write of ours just counted them."""
        seen = self._seen.get(tenant)
        if seen is not None:  # (nearly always: updated in place, no object made per create)
            seen.held, seen.at = held, self._clock()
            return
        if len(self._seen) >= self._max_keys:
            self._seen.clear()  # forgetting only costs a pre-check its round trip again
        self._seen[tenant] = _Seen(held, self._clock())

    def forget(self, tenant: str) -> None:
        self._seen.pop(tenant, None)

    def clear_below(self, tenant: str, budget: int) -> bool:
        """The key was seen, recently, well inside `budget`: the pre-check may skip its read."""
        seen = self._seen.get(tenant)
        return (seen is not None and self._clock() - seen.at < self._fresh_s
                and seen.held < budget * MARGIN)
