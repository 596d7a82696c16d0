"""The per-request metric families kept in plain numbers (proxy/telemetry/series.py) expose
exactly what prometheus_client's own families expose for the same samples."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from proxy.telemetry.metrics import DURATION_BUCKETS, Metrics
from proxy.telemetry.series import Family

_CREATED = re.compile(rb"^(\w+_created\{[^}]*\}) [0-9.e+]+$", re.MULTILINE)


def _exposed(registry: CollectorRegistry) -> bytes:
    """The text exposition, creation times blanked (each family takes its own clock)."""
    return _CREATED.sub(rb"\1 T", generate_latest(registry))


def _record(counter: object, gauge: object, histogram: object) -> None:
    requests: list[float] = [0.0001, 0.005, 0.0051, 2.5, 700.0, 3.0]
    for i, seconds in enumerate(requests):
        route = "/v1/responses" if i % 2 else "/healthz"
        counter.labels(route, "POST", "200").inc()  # type: ignore[attr-defined]
        histogram.labels(route).observe(seconds)  # type: ignore[attr-defined]
        gauge.labels(route).inc()  # type: ignore[attr-defined]
    gauge.labels("/healthz").dec()  # type: ignore[attr-defined]
    counter.labels("/x", "GET", "404").inc(3)  # type: ignore[attr-defined]


def test_the_families_expose_what_prometheus_clients_do() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    names = ("proxy_requests", "Requests.", ("route", "method", "status"))
    _record(Family("counter", *names, registry=ours),
            Family("gauge", "proxy_open", "Open.", ("route",), registry=ours),
            Family("histogram", "proxy_seconds", "Seconds.", ("route",),
                   buckets=DURATION_BUCKETS, registry=ours))
    _record(Counter(*names, registry=theirs),
            Gauge("proxy_open", "Open.", ("route",), registry=theirs),
            Histogram("proxy_seconds", "Seconds.", ("route",), buckets=DURATION_BUCKETS,
                      registry=theirs))
    assert _exposed(ours) == _exposed(theirs)
    assert b"proxy_seconds_bucket{le=\"+Inf\",route=\"/healthz\"} 3.0" in _exposed(ours)


def test_a_counter_refuses_to_go_down_as_prometheus_clients_does() -> None:
    family = Family("counter", "proxy_c", "C.", ("a",), registry=CollectorRegistry())
    with pytest.raises(ValueError, match="non-negative"):
        family.labels("x").inc(-1)


def test_an_apps_metrics_serving_alone_count_as_before() -> None:
    """`Metrics` without a multiprocess directory: its per-request families are ours, read
    back through the registry as any sample."""
    metrics = Metrics()
    series = metrics.route("/v1/responses")
    series.stream_opened()
    series.first_byte(0.02)
    series.finished("POST", 200, 0.3)
    series.stream_closed()
    metrics.response_finished("completed", input_tokens=5, output_tokens=2)
    assert isinstance(metrics._requests, Family)
    assert metrics.value("proxy_requests_total", route="/v1/responses", method="POST",
                         status="200") == 1.0
    assert metrics.value("proxy_ttft_seconds_count", route="/v1/responses") == 1.0
    assert metrics.value("proxy_open_streams", route="/v1/responses") == 0.0
    assert metrics.value("proxy_tokens_total", direction="output") == 2.0
    assert metrics.value("proxy_responses_total", status="completed") == 1.0
