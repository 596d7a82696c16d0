"""A deterministic JSON instance of a JSON schema: tool-call arguments and structured output.

What a model under guided decoding would produce, minus the creativity:
  string "sim" (a `format` gets a valid example; a hint `name=value` from the user's text wins;
  minLength/maxLength respected), integer 1 and number 1 (moved inside minimum/maximum),
  boolean true, null; `const` and the first of `enum` win over `type`; arrays get
  max(1, minItems) items (never more than maxItems); objects get every declared property plus
  any `required` name not declared; `anyOf`/`oneOf` take their first branch that is not
  `{"type": "null"}`; `allOf` branches are merged; `$ref` follows JSON pointers into the root
  schema (`#/$defs/X`, `#/definitions/X`, pydantic's style).

Invariant: the generator always terminates. Past MAX_DEPTH // 2 levels an object gets only its
required properties (so an optional recursive reference ends there); at MAX_DEPTH the value
falls back to null (a schema that requires infinite nesting has no finite instance anyway).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MAX_DEPTH = 24

_FORMATS = {
    "date-time": "2025-01-01T00:00:00Z",
    "date": "2025-01-01",
    "time": "00:00:00Z",
    "email": "sim@example.com",
    "uri": "https://example.com/sim",
    "url": "https://example.com/sim",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
    "hostname": "example.com",
}


def instance(schema: Any, hints: Mapping[str, str] | None = None, *,
             required_only: bool = False) -> Any:
    """A value valid against `schema`. `hints` map a property name to the string it gets;
    `required_only` leaves out every optional property, at every level (what a model that
    fills in only what it must would send)."""
    return _Generator(schema, hints or {}, required_only).value(schema, None, 0)


class _Generator:
    def __init__(self, root: Any, hints: Mapping[str, str], required_only: bool = False) -> None:
        self.required_only = required_only
        self.root = root
        self.hints = hints

    def value(self, schema: Any, name: str | None, depth: int) -> Any:
        if not isinstance(schema, dict):
            return None if schema is False else "sim"  # `true` accepts anything
        if depth > MAX_DEPTH:
            return None
        if isinstance(schema.get("$ref"), str):
            return self.value(self.resolve(schema["$ref"]), name, depth + 1)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][0]
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list) and branches:
                return self.value(_first_non_null(branches), name, depth + 1)
        if isinstance(schema.get("allOf"), list) and schema["allOf"]:
            return self.value(self.merged(schema), name, depth + 1)
        return self.typed(schema, _type_of(schema), name, depth)

    def typed(self, schema: dict[str, Any], kind: str, name: str | None, depth: int) -> Any:
        if kind == "object":
            return self.object(schema, depth)
        if kind == "array":
            return self.array(schema, name, depth)
        if kind == "integer":
            return math.ceil(_bounded(schema, 1))
        if kind == "number":
            # A whole number, written as one (`1`, not `1.5` or `1.0`): clients such as Codex
            # declare counters as `number` but parse them as integers. Bounds that leave no
            # whole number inside keep the fraction.
            value = _bounded(schema, 1)
            return int(value) if float(value).is_integer() else float(value)
        if kind == "boolean":
            return True
        if kind == "null":
            return None
        return self.string(schema, name)

    def object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = [k for k in schema.get("required") or () if isinstance(k, str)]
        if depth > MAX_DEPTH // 2 or self.required_only:
            # Deep down (recursive schemas) only what is required: that is what ends recursion.
            properties = {k: v for k, v in properties.items() if k in required}
        result = {key: self.value(sub, key, depth + 1) for key, sub in properties.items()}
        for key in required:
            if key not in result:
                result[key] = self.hints.get(key, "sim")
        return result

    def array(self, schema: dict[str, Any], name: str | None, depth: int) -> list[Any]:
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list) and prefix:
            return [self.value(sub, name, depth + 1) for sub in prefix]
        count = max(1, _int(schema.get("minItems"), 1))
        if isinstance(schema.get("maxItems"), int):
            count = min(count, schema["maxItems"])
        items = schema.get("items", {})
        return [self.value(items, name, depth + 1) for _ in range(count)]

    def string(self, schema: dict[str, Any], name: str | None) -> str:
        text = self.hints.get(name or "", "") or _FORMATS.get(str(schema.get("format")), "sim")
        low = _int(schema.get("minLength"), 0)
        while len(text) < low:
            text += "sim"
        if isinstance(schema.get("maxLength"), int):
            text = text[: schema["maxLength"]]
        return text

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return {}
        node = self.root
        for raw in ref[1:].split("/")[1:]:
            key = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                return {}
        return node

    def merged(self, schema: dict[str, Any]) -> dict[str, Any]:
        """`allOf` folded into one schema: properties and required lists unite."""
        out: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for branch in schema["allOf"]:
            part = self.resolve(branch["$ref"]) if isinstance(branch, dict) and "$ref" in branch \
                else branch
            if not isinstance(part, dict):
                continue
            for key, val in part.items():
                if key == "properties" and isinstance(val, dict):
                    out["properties"] = {**out.get("properties", {}), **val}
                elif key == "required" and isinstance(val, list):
                    out["required"] = [*out.get("required", []), *val]
                else:
                    out.setdefault(key, val)
        return out


def _first_non_null(branches: list[Any]) -> Any:
    for branch in branches:
        if not (isinstance(branch, dict) and branch.get("type") == "null"):
            return branch
    return branches[0]


def _type_of(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if isinstance(kind, str):
        return kind
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return "string"


def _bounded(schema: dict[str, Any], preferred: float) -> float:
    value = preferred
    low, high = _num(schema.get("minimum")), _num(schema.get("maximum"))
    xlow, xhigh = _num(schema.get("exclusiveMinimum")), _num(schema.get("exclusiveMaximum"))
    if low is not None and value < low:
        value = low
    if xlow is not None and value <= xlow:
        value = xlow + 1
    if high is not None and value > high:
        value = high
    if xhigh is not None and value >= xhigh:
        value = xhigh - 1
    return value


def _num(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return None


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
