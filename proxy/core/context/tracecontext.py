"""A client's W3C trace context (`traceparent`, `tracestate`), checked before it goes upstream.

With tracing off the proxy is a non-participating intermediary: W3C Trace Context asks it to
pass the context on unchanged, so a replica (vLLM continues an incoming `traceparent`) still
joins the client's trace. Unchanged, but never unchecked: a header value goes into the bytes
of our upstream request (client.py), so one that is not of the W3C shape is dropped, never
forwarded verbatim (a header injection). Per request, not per chunk; no regex: set lookups.

Pure: no I/O.
"""

from __future__ import annotations

_HEX = frozenset("0123456789abcdef")
# `traceparent` version 00: "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>".
_LENGTH = 55
# A later version may append fields ("-..."); we forward it whole up to this length.
MAX_TRACEPARENT = 256
# W3C: at most 32 list members; 512 characters is what every vendor must pass on.
MAX_TRACESTATE = 512
MAX_MEMBERS = 32
_KEY = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-*/@")
# A value: printable ASCII but ',' and '=' (a member's outer spaces are stripped first).
_VALUE = frozenset(chr(c) for c in range(0x20, 0x7F)) - {",", "="}


def accept_traceparent(value: str | None) -> str | None:
    """`value` when it is a W3C `traceparent` (lowercase hex, ids not all zero, version not
    ff; a later version's extra fields kept), else None."""
    if not value or not _LENGTH <= len(value) <= MAX_TRACEPARENT:
        return None
    version, trace_id, parent_id, flags = (value[0:2], value[3:35], value[36:52],
                                           value[53:55])
    if (value[2], value[35], value[52]) != ("-", "-", "-") or version == "ff" \
            or not _HEX.issuperset(version + trace_id + parent_id + flags) \
            or trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    if len(value) == _LENGTH:
        return value
    # Version 00 has exactly four fields; a later one may have more, of the same alphabet.
    if version == "00" or value[_LENGTH] != "-" or not _HEX.issuperset(
            value[_LENGTH + 1:].replace("-", "")):
        return None
    return value


def accept_tracestate(value: str | None) -> str | None:
    """`value` when it is a W3C `tracestate` list (`key=value` members, comma separated, at
    most 32, at most 512 characters), else None (dropped: the parent alone still joins)."""
    if not value or len(value) > MAX_TRACESTATE:
        return None
    members = value.split(",")
    if len(members) > MAX_MEMBERS:
        return None
    for member in members:
        member = member.strip(" \t")
        if not member:
            continue  # an empty member is allowed (and ignored)
        key, sep, text = member.partition("=")
        if not sep or not key or not text or not _KEY.issuperset(key) \
                or not _VALUE.issuperset(text):
            return None
    return value


def accept_trace_context(traceparents: list[str], tracestates: list[str]
                         ) -> tuple[str | None, str | None]:
    """A request's (traceparent, tracestate) from all its header values: no parent when there
    is not exactly one valid `traceparent` (W3C: its `tracestate` then goes too); the
    `tracestate` values joined (a list may be split over several headers), kept if valid."""
    parent = accept_traceparent(traceparents[0]) if len(traceparents) == 1 else None
    if parent is None:
        return None, None
    return parent, accept_tracestate(",".join(tracestates)) if tracestates else None


def trace_headers(traceparent: str, tracestate: str | None) -> bytes:
    """The header lines of an accepted trace context, for an upstream request."""
    lines = b"traceparent: " + traceparent.encode("ascii") + b"\r\n"
    if tracestate is not None:
        lines += b"tracestate: " + tracestate.encode("ascii") + b"\r\n"
    return lines
