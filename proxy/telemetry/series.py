"""Metric families whose values are plain numbers of this process: what a request counts, at a
call each (an attribute added to), exposed in prometheus_client's own text form.

A prometheus_client child takes five Python calls per `inc` and seven per `observe` (its checks
that it is a child, its value's method, its lock: made for threads, and for the per-process files
of multiprocess mode). A short request records nine samples: ~55 calls, ~6% of a store-off
stream's set-up. Here the same sample is one call (a histogram's two: its bucket is found by
`bisect`). Counting happens on the event loop's thread only, so no lock is needed; a scrape
reads the numbers as they are.

Only for a process serving alone: under `serve --workers N` the samples must reach the shared
files, and the app keeps prometheus_client's families there (metrics.py). Each family here is
a collector of its own, registered where prometheus_client's would be, so the exposition keeps
its order; its samples are those prometheus_client gives (a counter's `_total` and `_created`,
a histogram's cumulative `_bucket`s, `_count`, `_sum`, `_created`), tested side by side
(tests/unit/test_metric_series.py).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString


def _go(bound: float) -> str:
    """A bucket's `le` label as prometheus_client writes it."""
    text: str = floatToGoString(bound)  # type: ignore[no-untyped-call]
    return text


class CounterChild:
    __slots__ = ("created", "value")

    def __init__(self, created: float) -> None:
        self.value = 0.0
        self.created = created

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:  # what prometheus_client refuses too
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class GaugeChild:
    __slots__ = ("value",)

    def __init__(self, created: float) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class HistogramChild:
    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...], created: float) -> None:
        self.bounds = bounds  # upper bounds, +Inf last
        self.counts = [0] * len(bounds)  # per bucket (not cumulative)
        self.sum = 0.0
        self.created = created

    def observe(self, amount: float) -> None:
        self.sum += amount
        self.counts[bisect_left(self.bounds, amount)] += 1  # the first bound >= amount


Child = CounterChild | GaugeChild | HistogramChild


class Family:
    """One labelled family (`kind`: "counter", "gauge" or "histogram"), registered in
    `registry`; `labels(*values)` its child for those values, made on first use."""

    def __init__(self, kind: str, name: str, documentation: str, labelnames: Sequence[str] = (),
                 *, registry: CollectorRegistry, buckets: Sequence[float] = ()) -> None:
        if kind == "counter" and name.endswith("_total"):
            name = name[:-len("_total")]  # as prometheus_client names a counter's family
        self.kind = kind
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._bounds = (*(float(b) for b in buckets), float("inf")) if kind == "histogram" \
            else ()
        self._children: dict[tuple[str, ...], Child] = {}
        registry.register(self)

    def labels(self, *values: str) -> Child:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            created = time.time()
            child = self._children[key] = (
                HistogramChild(self._bounds, created) if self.kind == "histogram" else
                CounterChild(created) if self.kind == "counter" else GaugeChild(created))
        return child

    # -- the collector ------------------------------------------------------------------------
    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.documentation, self.kind)]

    def collect(self) -> Iterator[Metric]:
        metric = Metric(self.name, self.documentation, self.kind)
        name = self.name
        for values, child in list(self._children.items()):
            labels = dict(zip(self.labelnames, values, strict=True))
            if isinstance(child, CounterChild):
                metric.add_sample(name + "_total", labels, child.value)
                metric.add_sample(name + "_created", labels, child.created)
            elif isinstance(child, GaugeChild):
                metric.add_sample(name, labels, child.value)
            else:
                total = 0.0
                for bound, count in zip(child.bounds, list(child.counts), strict=True):
                    total += count
                    metric.add_sample(name + "_bucket",
                                      {**labels, "le": _go(bound)}, total)
                metric.add_sample(name + "_count", labels, total)
                metric.add_sample(name + "_sum", labels, child.sum)
                metric.add_sample(name + "_created", labels, child.created)
        yield metric
