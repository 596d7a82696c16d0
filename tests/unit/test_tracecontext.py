"""core/context/tracecontext.py: a client's W3C trace context, checked before it is passed on."""

from __future__ import annotations

from proxy.core.context.tracecontext import (
    MAX_TRACESTATE,
    accept_trace_context,
    accept_traceparent,
    accept_tracestate,
    trace_headers,
)

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_version_00_traceparent_is_kept_as_sent() -> None:
    assert accept_traceparent(PARENT) == PARENT
    assert accept_traceparent(PARENT[:-2] + "00") == PARENT[:-2] + "00"


def test_a_later_version_keeps_its_extra_fields_of_the_same_alphabet() -> None:
    later = "cc" + PARENT[2:] + "-abcd"
    assert accept_traceparent(later) == later
    assert accept_traceparent(later + "\r\nx-evil: 1") is None
    assert accept_traceparent("cc" + PARENT[2:] + "x") is None


def test_malformed_traceparents_are_refused() -> None:
    for bad in (None, "", PARENT.upper(), PARENT[:-1], PARENT + "-00", "ff" + PARENT[2:],
                PARENT.replace("-", "_"), "00-" + "0" * 32 + PARENT[35:],
                PARENT[:36] + "0" * 16 + PARENT[52:], PARENT[:-2] + "zz",
                PARENT + "\r\nx-evil: 1"):
        assert accept_traceparent(bad) is None, bad


def test_tracestate_members_are_checked() -> None:
    assert accept_tracestate("congo=t61rcWkgMzE, rojo=00f067aa0ba902b7") is not None
    assert accept_tracestate("tenant@vendor=x,,") is not None
    for bad in ("novalue", "=x", "Upper=x", "a=b=c", "a=\x00", "a=\u00e9", "a=1\r\nx: y",
                ",".join(f"k{n}=v" for n in range(33)), "a=" + "x" * MAX_TRACESTATE):
        assert accept_tracestate(bad) is None, bad


def test_a_context_needs_exactly_one_valid_parent_and_keeps_a_valid_state() -> None:
    assert accept_trace_context([PARENT], ["a=1", "b=2"]) == (PARENT, "a=1,b=2")
    assert accept_trace_context([PARENT, PARENT], ["a=1"]) == (None, None)
    assert accept_trace_context(["bad"], ["a=1"]) == (None, None)
    assert accept_trace_context([PARENT], ["bad"]) == (PARENT, None)
    assert trace_headers(PARENT, "a=1") == (b"traceparent: " + PARENT.encode()
                                            + b"\r\ntracestate: a=1\r\n")
