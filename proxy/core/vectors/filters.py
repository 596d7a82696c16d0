"""Attribute filters of a vector store search and of the file_search tool (the SDK's
`ComparisonFilter` and `CompoundFilter`). Pure.

    {"type": "eq"|"ne"|"gt"|"gte"|"lt"|"lte"|"in"|"nin", "key": k, "value": v}
    {"type": "and"|"or", "filters": [<filter>, ...]}

`parse_filters` checks a filter (a 400 naming the field, nesting and size bounded) and
`matches` applies it to a file's attributes (strings, numbers, booleans). A comparison on a key
the file lacks, or between values of different kinds (a number with a string), is false, as is
an ordering (gt, ...) of booleans.
"""

from __future__ import annotations

from typing import Any

from proxy.core.request.fields import at, bad, expect_list, expect_object, one_of, req_str

COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
COMPOUNDS = ("and", "or")
MAX_DEPTH = 4
MAX_FILTERS = 64  # comparisons in one filter, all levels together

Scalar = str | int | float | bool


def parse_filters(value: Any, path: str) -> dict[str, Any] | None:
    if value is None:
        return None
    count = [0]
    return _parse(value, path, 1, count)


def _parse(value: Any, path: str, depth: int, count: list[int]) -> dict[str, Any]:
    node = expect_object(value, path)
    kind = one_of(node.get("type"), COMPARISONS + COMPOUNDS, at(path, "type"))
    if kind in COMPOUNDS:
        if depth >= MAX_DEPTH:
            raise bad(path, f"Invalid '{path}': filters nest at most {MAX_DEPTH} levels.")
        inner = expect_list(node.get("filters"), at(path, "filters"))
        return {"type": kind, "filters": [_parse(f, at(at(path, "filters"), i), depth + 1, count)
                                          for i, f in enumerate(inner)]}
    count[0] += 1
    if count[0] > MAX_FILTERS:
        raise bad(path, f"Invalid '{path}': at most {MAX_FILTERS} comparisons per filter.")
    key = req_str(node, "key", path)
    where = at(path, "value")
    raw = node.get("value")
    if kind in ("in", "nin"):
        items = expect_list(raw, where)
        for i, item in enumerate(items):
            _scalar(item, at(where, i))
        return {"type": kind, "key": key, "value": list(items)}
    return {"type": kind, "key": key, "value": _scalar(raw, where)}


def _scalar(value: Any, path: str) -> Scalar:
    if not isinstance(value, str | int | float | bool):
        raise bad(path, f"Invalid '{path}': expected a string, number or boolean.")
    return value


def matches(node: dict[str, Any] | None, attributes: dict[str, Any]) -> bool:
    if node is None:
        return True
    kind = node["type"]
    if kind == "and":
        return all(matches(f, attributes) for f in node["filters"])
    if kind == "or":
        return any(matches(f, attributes) for f in node["filters"])
    if node["key"] not in attributes:
        return kind in ("ne", "nin")
    have, want = attributes[node["key"]], node["value"]
    if kind == "in":
        return any(_same(have, w) for w in want)
    if kind == "nin":
        return not any(_same(have, w) for w in want)
    if kind == "eq":
        return _same(have, want)
    if kind == "ne":
        return not _same(have, want)
    return _ordered(kind, have, want)


def _ordered(kind: str, have: Any, want: Any) -> bool:
    if isinstance(have, bool) or isinstance(want, bool) or _numeric(have) != _numeric(want):
        return False
    if kind == "gt":
        return bool(have > want)
    if kind == "gte":
        return bool(have >= want)
    if kind == "lt":
        return bool(have < want)
    return bool(have <= want)


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _numeric(a) != _numeric(b):
        return False
    return bool(a == b)
