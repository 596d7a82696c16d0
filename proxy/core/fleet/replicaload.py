"""A replica's load as its own `/metrics` tells it (vLLM's Prometheus text), and the one load
figure the balancer compares (core/fleet/balancer.py states the formula).

Only three gauges matter, so a few lines of parsing beat a Prometheus parser: a sample line is
`name{labels} value [timestamp]`; vLLM writes one sample per served model (`model_name` label),
so running and waiting requests are summed over them and the KV-cache usage is their maximum.
`vllm:gpu_cache_usage_perc` (vLLM before 0.10) and `vllm:kv_cache_usage_perc` (after) are the
same gauge under two names. Anything else (comments, other metrics, malformed lines) is skipped:
a replica that sends nothing useful simply has no signal (None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


@dataclass(frozen=True, slots=True)
class Signal:
    """What one scrape saw, with this process's own in-flight count at that moment (those
    requests are part of `running + waiting`: the balancer counts them live instead)."""

    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0  # 0..1
    own_at_scrape: int = 0


def parse_signal(text: str, own_in_flight: int) -> Signal | None:
    running = waiting = kv = 0.0
    seen = False
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=len(line))
        name = line[:end]
        if name not in (RUNNING, WAITING, *KV_USAGE):
            continue
        # The value follows the labels (whose quoted values may hold spaces) or the name.
        value = _value(line.rpartition("}")[2] if line[end:end + 1] == "{" else line[end:])
        if value is None:
            continue
        seen = True
        if name == RUNNING:
            running += value
        elif name == WAITING:
            waiting += value
        else:
            kv = max(kv, min(value, 1.0))
    if not seen:
        return None
    return Signal(running, waiting, kv, own_in_flight)


def _value(tail: str) -> float | None:
    fields = tail.split()
    if not fields:
        return None
    try:
        value = float(fields[0])
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def load(in_flight: int, signal: Signal | None) -> float:
    """requests * (1 + kv_usage), requests = our live in-flight + everybody else's as of the
    last scrape (never negative: our own may have finished since)."""
    if signal is None:
        return float(in_flight)
    others = max(0.0, signal.running + signal.waiting - signal.own_at_scrape)
    return (in_flight + others) * (1.0 + signal.kv_usage)
