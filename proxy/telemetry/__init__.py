"""Telemetry: what every serving layer reports through.

    metrics.py  the Prometheus registry and `/metrics`
    series.py   the per-request families in plain numbers (a process serving alone)
    tracing.py  OpenTelemetry spans (off unless `--otlp-endpoint` is given)
    logs.py     the process's logging set-up (text or JSON lines)

May import: `proxy.core`, `proxy.settings` (tests/unit/test_layers.py).
"""
