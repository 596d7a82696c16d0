"""Typed reads from request JSON, each failure a 400 naming the exact parameter.

A `Path` is the parameter's name as OpenAI spells it in errors: `input[2].content[0].type`.
Every reader takes the object, the key and the path of the object, so a message can say
precisely which field is wrong and why, and nothing here knows about any particular endpoint.
JSON `null` is read as "absent" wherever a field is optional (the SDKs send explicit nulls).
"""

from __future__ import annotations

from typing import Any

from proxy.core.errors import InvalidRequest


def at(path: str, key: str | int) -> str:
    """`at("input", 2)` → `input[2]`; `at("input[2]", "content")` → `input[2].content`."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def bad(path: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, param=path)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def expect_object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(path, f"Invalid type for '{path}': expected an object, but got {_kind(value)}.")
    return value


def expect_list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise bad(path, f"Invalid type for '{path}': expected an array, but got {_kind(value)}.")
    return value


def expect_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise bad(path, f"Invalid type for '{path}': expected a string, but got {_kind(value)}.")
    return value


def required(obj: dict[str, Any], key: str, path: str = "") -> Any:
    value = obj.get(key)
    if value is None:
        where = at(path, key)
        raise bad(where, f"Missing required parameter: '{where}'.")
    return value


def req_str(obj: dict[str, Any], key: str, path: str = "", *, nonempty: bool = True) -> str:
    where = at(path, key)
    value = expect_str(required(obj, key, path), where)
    if nonempty and not value:
        raise bad(where, f"Invalid '{where}': empty string.")
    return value


def opt_str(obj: dict[str, Any], key: str, path: str = "", *,
            max_len: int | None = None) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    where = at(path, key)
    text = expect_str(value, where)
    if max_len is not None and len(text) > max_len:
        raise bad(where, f"Invalid '{where}': string too long. Expected a string with maximum "
                         f"length {max_len}, but got a string with length {len(text)} instead.")
    return text


def opt_bool(obj: dict[str, Any], key: str, path: str = "") -> bool | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        where = at(path, key)
        raise bad(where, f"Invalid type for '{where}': expected a boolean, but got "
                         f"{_kind(value)}.")
    return value


# pydantic v2's lax booleans (vLLM's request models read `stream` so), strings case-insensitive.
_LAX_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_LAX_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def lax_bool(obj: dict[str, Any], key: str) -> bool | None:
    """`obj[key]` read as vLLM reads a boolean (pydantic's lax mode: true/false, 0/1 and the
    strings t/true/on/y/yes/1, f/false/off/n/no/0); anything else is a 400 naming `key`. A
    body passed to vLLM as it is must be read the same way here, or the proxy and the replica
    disagree on what the request is (e.g. a stream that the proxy takes for a JSON answer)."""
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _LAX_TRUE | _LAX_FALSE:
        return value.lower() in _LAX_TRUE
    raise bad(key, f"Invalid type for '{key}': expected a boolean, but got {_kind(value)}.")


def opt_number(obj: dict[str, Any], key: str, path: str = "", *, low: float,
               high: float) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    where = at(path, key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(where, f"Invalid type for '{where}': expected a number, but got "
                         f"{_kind(value)}.")
    if not low <= value <= high:
        raise bad(where, f"Invalid '{where}': {value} is out of range; expected a value "
                         f"between {low:g} and {high:g}.")
    return float(value)


def opt_int(obj: dict[str, Any], key: str, path: str = "", *, low: int,
            high: int | None = None) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    where = at(path, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(where, f"Invalid type for '{where}': expected an integer, but got "
                         f"{_kind(value)}.")
    if value < low or (high is not None and value > high):
        limit = f"at least {low}" if high is None else f"between {low} and {high}"
        raise bad(where, f"Invalid '{where}': {value} is out of range; expected {limit}.")
    return value


def one_of(value: Any, choices: tuple[str, ...], path: str) -> str:
    if value not in choices:
        listed = ", ".join(f"'{c}'" for c in choices)
        raise bad(path, f"Invalid value for '{path}': {value!r}. Supported values are: {listed}.")
    return str(value)


def check_metadata(value: Any, path: str = "metadata") -> dict[str, str]:
    """OpenAI's rule: at most 16 pairs, keys up to 64 characters, string values up to 512."""
    if value is None:
        return {}
    data = expect_object(value, path)
    if len(data) > 16:
        raise bad(path, f"Invalid '{path}': too many keys ({len(data)}); at most 16 are allowed.")
    for key, item in data.items():
        if len(key) > 64:
            raise bad(path, f"Invalid '{path}': key {key[:20]!r}… is longer than 64 characters.")
        where = at(path, key)
        text = expect_str(item, where)
        if len(text) > 512:
            raise bad(where, f"Invalid '{where}': value is longer than 512 characters.")
    return dict(data)
