"""Prometheus text metrics without a dependency: a few labelled counters and gauges.

Counters are bumped per request or per finished stream, never per token (the hot path stays free
of bookkeeping); token totals are added once when a stream ends.
"""

from __future__ import annotations

from collections import defaultdict

_HELP = {
    "proxy_requests_total": "HTTP requests answered, by route and status.",
    "proxy_streamed_tokens_total": "Output tokens streamed to clients, by route.",
    "proxy_responses_total": "Responses finished, by terminal status.",
    "proxy_streams_active": "Streams open right now, by route.",
    "proxy_cache_requests_total": "Cache lookups by route and result (hit, miss, bypass).",
    "proxy_cache_hits_total": "Cache hits by route and kind (exact, semantic).",
    "proxy_cache_lookup_seconds_sum": "Seconds spent in cache lookups (embedding included).",
    "proxy_cache_lookup_seconds_count": "Cache lookups timed.",
    "proxy_cache_writes_total": "Answers kept in the cache, by route.",
    "proxy_cache_embedding_errors_total": "Embedding calls that failed or were too slow.",
}


class Metrics:
    def __init__(self) -> None:
        self._values: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(
            lambda: defaultdict(float)
        )
        self._gauges: set[str] = {"proxy_streams_active"}

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        self._values[name][tuple(sorted(labels.items()))] += amount

    def dec(self, name: str, amount: float = 1.0, **labels: str) -> None:
        self._values[name][tuple(sorted(labels.items()))] -= amount

    def value(self, name: str, **labels: str) -> float:
        return self._values.get(name, {}).get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> str:
        lines: list[str] = []
        for name in sorted(self._values):
            kind = "gauge" if name in self._gauges else "counter"
            lines.append(f"# HELP {name} {_HELP.get(name, name)}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, value in sorted(self._values[name].items()):
                label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
                suffix = f"{{{label_text}}}" if label_text else ""
                lines.append(f"{name}{suffix} {value:g}")
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
