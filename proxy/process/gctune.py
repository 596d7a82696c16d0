"""The garbage collector of a serving process: fewer, cheaper collections.

Why (docs/benchmarks-history.md, "Redis beside the proxy, bursts, short answers, processes": the
garbage collector): reference counting frees almost everything the per-token path allocates at once,
but futures, generator frames and per-request objects survive long enough to count towards CPython's
collection thresholds. With the defaults (700 / 10 / 10) a proxy streaming 256 answers ran ~500
young-generation collections a minute, each walking what survived the last one, and a full
collection every ~15 s that walked the ~60,000 objects the imports made (starlette, uvicorn,
redis-py, the proxy itself), which never die. Measured with `gc.callbacks` in the 256 x 20 ms row:
the collector took ~7% of the proxy's CPU; after `freeze` + the thresholds below, ~1%.

- `gc.freeze()` once start-up is over moves every object alive then to a permanent generation
  that collections skip (what it holds lives for the process anyway);
- a young-generation threshold of 20,000 instead of 700: each collection then pays its fixed
  cost once for ~30 times as many allocations; a collection of that size takes about a
  millisecond, which a stream's next token does not notice. Cyclic garbage waits a little longer
  before it is freed (bounded by the threshold: a few MiB at most);
- the older generations' thresholds stay near the defaults' ratio, so long-lived cycles are still
  found in minutes, not hours.

Process-wide by nature, so it is called once, from the command that starts a serving process
(`cli.py`: `serve`, each `--workers` child, `worker`, `simulate`), never from `create_app`:
the test suite builds many apps in one process and keeps the defaults.
"""

from __future__ import annotations

import gc

YOUNG = 20_000
MIDDLE = 20
OLD = 20


def tune_for_serving() -> None:
    """Call once, after the imports and the app's construction (what is alive then is frozen)."""
    gc.collect()  # garbage made during start-up is freed, not frozen
    gc.freeze()
    gc.set_threshold(YOUNG, MIDDLE, OLD)
