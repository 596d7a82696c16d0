"""Tracing's settings and set-up (telemetry/tracing.py): where the endpoint comes from, that a bad
one is refused naming the flag, and that with none nothing is built (no provider, no span
middleware: the request path pays nothing)."""

from __future__ import annotations

import pytest

from proxy.app import create_app
from proxy.settings import ConfigError, Settings, build_settings
from proxy.telemetry.tracing import Tracing, traces_url
from proxy.web.middleware.tracing import TraceMiddleware


def test_the_endpoint_comes_from_the_flag_ours_or_the_standard_variable() -> None:
    assert build_settings({}, {}).server.otlp_endpoint is None
    standard = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert build_settings({}, standard).server.otlp_endpoint == "http://collector:4318"
    ours = {**standard, "PROXY_OTLP_ENDPOINT": "http://ours:4318"}
    assert build_settings({}, ours).server.otlp_endpoint == "http://ours:4318"
    flag = build_settings({"otlp_endpoint": "https://flag:4318"}, ours)
    assert flag.server.otlp_endpoint == "https://flag:4318"


@pytest.mark.parametrize("raw", ["collector:4318", "grpc://c:4317", "http://"])
def test_a_bad_endpoint_names_the_flag(raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_settings({"otlp_endpoint": raw}, {})
    assert info.value.flag == "--otlp-endpoint"


def test_the_traces_path_is_added_once() -> None:
    assert traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/v1/traces") == "http://c:4318/v1/traces"


def test_without_an_endpoint_nothing_is_built() -> None:
    assert Tracing.open(None) is None
    assert Tracing.open("http://127.0.0.1:1", {"OTEL_SDK_DISABLED": "true"}) is None
    plain = create_app(Settings.of(upstreams=("http://127.0.0.1:1",)))
    assert all(m.cls is not TraceMiddleware for m in plain.user_middleware)
    traced = create_app(Settings.of(upstreams=("http://127.0.0.1:1",),
                                    otlp_endpoint="http://127.0.0.1:1"))
    assert any(m.cls is TraceMiddleware for m in traced.user_middleware)


def test_the_service_name_is_the_standard_variable() -> None:
    tracing = Tracing.open("http://127.0.0.1:1", {"OTEL_SERVICE_NAME": "edge-proxy"})
    assert tracing is not None
    try:
        assert tracing.provider.resource.attributes["service.name"] == "edge-proxy"
    finally:
        tracing.shutdown()


def test_a_job_spec_carries_the_creating_request_s_traceparent_across_the_queue() -> None:
    from proxy.services.generation.spec import JobSpec

    parent = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    spec = JobSpec("tenant", "m", {"messages": []}, traceparent=parent)
    assert JobSpec.from_json(spec.to_json()).traceparent == parent
    untraced = JobSpec("tenant", "m", {"messages": []})
    assert b"traceparent" not in untraced.to_json()  # tracing off: the spec as before
    assert JobSpec.from_json(untraced.to_json()).traceparent is None


def test_an_upstream_span_names_the_replica_without_its_credentials(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The ended span is exported at shutdown to a port that refuses: a short export timeout
    # (the standard variable, read by the exporter) ends its retries at once, not after ~3 s.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.05")
    tracing = Tracing.open("http://127.0.0.1:1")
    assert tracing is not None
    try:
        span = tracing.upstream_span("", "https://user:s3cret@vllm.internal/v1", "m", "chat")
        attributes = dict(span.attributes or {})  # type: ignore[attr-defined]
        span.end()
    finally:
        tracing.shutdown()
    assert attributes["server.address"] == "vllm.internal"
    assert attributes["server.port"] == 443
    assert "s3cret" not in repr(attributes)


@pytest.mark.parametrize("raw", ["lots", "-3", ""])
def test_a_bad_queue_size_variable_falls_back_to_the_bound(raw: str) -> None:
    tracing = Tracing.open("http://127.0.0.1:1", {"OTEL_BSP_MAX_QUEUE_SIZE": raw})
    assert tracing is not None
    tracing.shutdown()
