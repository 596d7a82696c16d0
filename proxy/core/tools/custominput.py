"""A custom (freeform) tool's input and its upstream arguments. Pure.

Upstream a custom tool is a function of one string, `{"input": "..."}` (core/tools/toolnames.py).
Its call's arguments are unwrapped back into the `input` of a `custom_tool_call`: while they stream
(`InputStream`, for `response.custom_tool_call_input.delta`) and once they are whole
(`custom_input`). A model that wrote the input bare, or in another object shape, still gets it
through, whole at the end.
"""

from __future__ import annotations

import json

CUSTOM_ARGUMENT = "input"


def custom_arguments(text: str) -> str:
    """A custom tool's input as the arguments of its upstream function."""
    return json.dumps({CUSTOM_ARGUMENT: text}, ensure_ascii=False)


def custom_input(arguments: str) -> str:
    """The input of a custom tool call from its upstream arguments. A model that wrote the
    input bare instead of as `{"input": ...}` still gets it through unchanged."""
    try:
        value = json.loads(arguments, strict=False)
    except ValueError:
        return arguments
    if isinstance(value, dict):
        text = value.get(CUSTOM_ARGUMENT)
        if isinstance(text, str):
            return _whole(text)
        strings = [v for v in value.values() if isinstance(v, str)]
        if len(value) == 1 and strings:
            return _whole(strings[0])
    return arguments


def _whole(text: str) -> str:
    """`text` with any lone surrogate (a `\\ud83d` escape without its pair) replaced: such a
    string cannot be encoded as UTF-8, so no event could carry it."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


class InputStream:
    """A custom tool's input streamed while its upstream arguments arrive: the string value of
    `{"input": "..."}` decoded piece by piece, each piece cut where no escape is split, so the
    pieces join to exactly the string. Arguments of another shape are not streamed: their input
    is found when the call ends (`finish`). Only custom tool calls pay for this, per fragment."""

    __slots__ = ("_pending", "_state", "sent")

    _SEEK, _STRING, _END, _OFF = range(4)

    def __init__(self) -> None:
        self._state = self._SEEK
        self._pending = ""  # arguments not yet decoded (the opening, or a split escape)
        self.sent: list[str] = []

    def feed(self, fragment: str) -> str:
        """The input text these arguments add ("" when there is none yet)."""
        state = self._state
        if state in (self._END, self._OFF):
            return ""
        pending = self._pending + fragment
        if state == self._SEEK:
            start = _value_start(pending)
            if start is None:
                self._pending = pending
                return ""
            if start < 0:
                self._state, self._pending = self._OFF, ""
                return ""
            self._state, pending = self._STRING, pending[start:]
        cut, closed = _safe_cut(pending)
        self._pending = pending[cut + 1 if closed else cut:]
        if closed:
            self._state, self._pending = self._END, ""
        text = _decode(pending[:cut])
        if text:
            self.sent.append(text)
        return text

    def finish(self, arguments: str) -> tuple[str, str]:
        """(the whole input, the part of it not sent yet), once the call has ended."""
        if self._state in (self._STRING, self._END):
            return "".join(self.sent), ""  # a cut-off string keeps what was sent
        text = custom_input(arguments)
        return text, text


_OPENING = ("{", '"' + CUSTOM_ARGUMENT + '"', ":", '"')
_SPACE = " \t\r\n"


def _value_start(raw: str) -> int | None:
    """Where the input string's text starts in `raw`; None: too early to say; -1: not the
    `{"input": "` shape."""
    i = 0
    for token in _OPENING:
        while i < len(raw) and raw[i] in _SPACE:
            i += 1
        seen = raw[i:i + len(token)]
        if seen != token[:len(seen)]:
            return -1
        if len(seen) < len(token):
            return None
        i += len(token)
    return i


def _safe_cut(raw: str) -> tuple[int, bool]:
    """How much of a JSON string's raw text decodes on its own (no escape or surrogate pair
    split), and whether the string's closing quote ends it there."""
    i, n = 0, len(raw)
    while i < n:
        char = raw[i]
        if char == '"':
            return i, True
        if char != "\\":
            i += 1
            continue
        if i + 1 >= n:
            break
        if raw[i + 1] != "u":
            i += 2
            continue
        if i + 6 > n:
            break
        high = raw[i + 2:i + 6].lower()
        if "d800" <= high <= "dbff":  # a high surrogate: keep its low half with it
            if i + 8 > n:
                break
            if raw[i + 6:i + 8] == "\\u":
                if i + 12 > n:
                    break
                i += 12
            else:  # a lone one: decoded on its own (and replaced)
                i += 6
            continue
        i += 6
    return i, False


def _decode(raw: str) -> str:
    try:
        text = json.loads('"' + raw + '"', strict=False)
    except ValueError:  # a bad escape: the model's characters as they came
        return raw
    return _whole(text) if isinstance(text, str) else raw
