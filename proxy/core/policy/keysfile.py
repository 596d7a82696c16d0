"""The `--keys-file` document (docs/contract.md "Operations"), parsed and validated. Pure: the
caller reads the file and decodes JSON or YAML; this module checks the decoded data.

    {"defaults": {...limits}, "keys": [{"key": "sk-...", "name": "team-a", ...limits}]}

Limits: `rpm` (requests per minute), `tpm` (tokens per minute, input + output), `max_streams`
(open streams and running background jobs at once), `token_budget` (tokens in total); each a
positive integer, each optional. A key's missing limits come from `defaults`, which also apply
to keys given with `--api-key`. `priority: true` (per key, not in `defaults`) lets the key's
`service_tier: "priority"` go ahead of other keys in the fleet's queue. `cache_group` (a name,
optional): keys with the same group share one prefix-cache salt, so they reuse each other's
cached prompts on vLLM (core/policy/tenancy.py); every other key's prompts are cached apart.
Every problem is one `KeysFileError` naming the field (`keys[2].rpm`), so the start-up message
points at the line to fix. Unknown fields are refused: a typo (`rmp`) would otherwise silently
leave a key unlimited.

`max_stored_bytes`: bytes the key may keep stored (its responses and conversations), a
non-negative integer (0: no limit), optional like the others; enforced by the store
(core/policy/storagebudget.py), not by services/metering/limits.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

LIMIT_FIELDS = ("rpm", "tpm", "max_streams", "token_budget", "max_stored_bytes")
# Limits the store enforces (core/policy/storagebudget.py), not services/metering/limits.py; 0 means
# unlimited.
STORE_FIELDS = ("max_stored_bytes",)


class KeysFileError(ValueError):
    """One bad field: `where` names it (`keys[0].tpm`), the message says what is wrong."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


@dataclass(frozen=True)
class Limits:
    """None: no limit of that kind."""

    rpm: int | None = None
    tpm: int | None = None
    max_streams: int | None = None
    token_budget: int | None = None
    max_stored_bytes: int | None = None

    @property
    def any(self) -> bool:
        """Any limit services/metering/limits.py enforces (the store enforces STORE_FIELDS)."""
        return any(getattr(self, f.name) is not None for f in fields(self)
                   if f.name not in STORE_FIELDS)

    def over(self, base: Limits) -> Limits:
        """These limits, with `base`'s where these leave one unset."""
        return replace(base, **{f.name: getattr(self, f.name) for f in fields(self)
                                if getattr(self, f.name) is not None})


@dataclass(frozen=True)
class KeyEntry:
    key: str
    name: str
    limits: Limits  # defaults already merged in
    priority: bool = False  # its `service_tier: "priority"` is honoured
    cache_group: str | None = None  # keys of one group share a prefix-cache salt

    def __repr__(self) -> str:  # never print a key (settings are logged and shown in errors)
        return (f"KeyEntry(name={self.name!r}, limits={self.limits!r}, "
                f"priority={self.priority!r}, cache_group={self.cache_group!r})")


@dataclass(frozen=True)
class KeysFile:
    defaults: Limits = Limits()
    keys: tuple[KeyEntry, ...] = ()
    source: str | None = None  # the file it was read from: read again on SIGHUP


def parse_keys_file(data: object) -> KeysFile:
    if not isinstance(data, Mapping):
        raise KeysFileError("(top level)", "expected an object with `defaults` and `keys`")
    _no_unknown(data, ("defaults", "keys"), "")
    defaults = _limits(data.get("defaults", {}), "defaults")
    raw_keys = data.get("keys", [])
    if not isinstance(raw_keys, list):
        raise KeysFileError("keys", "expected a list of {key, name, ...limits}")
    entries: list[KeyEntry] = []
    seen_keys: set[str] = set()
    seen_names: set[str] = set()
    for index, raw in enumerate(raw_keys):
        entry = _entry(raw, f"keys[{index}]", index, defaults)
        if entry.key in seen_keys:
            raise KeysFileError(f"keys[{index}].key", "the same key is listed twice")
        if entry.name in seen_names:
            raise KeysFileError(f"keys[{index}].name", f"the name {entry.name!r} is taken")
        seen_keys.add(entry.key)
        seen_names.add(entry.name)
        entries.append(entry)
    return KeysFile(defaults, tuple(entries))


def _entry(raw: object, where: str, index: int, defaults: Limits) -> KeyEntry:
    if not isinstance(raw, Mapping):
        raise KeysFileError(where, "expected an object {key, name, ...limits}")
    _no_unknown(raw, ("key", "name", "priority", "cache_group", *LIMIT_FIELDS), where + ".")
    key = raw.get("key")
    if not isinstance(key, str) or not key or any(c.isspace() for c in key):
        raise KeysFileError(where + ".key", "a non-empty string without whitespace is required")
    name = raw.get("name", f"key-{index}")
    if not isinstance(name, str) or not name.strip():
        raise KeysFileError(where + ".name", "must be a non-empty string")
    priority = raw.get("priority", False)
    if not isinstance(priority, bool):
        raise KeysFileError(where + ".priority", f"must be true or false, got {priority!r}")
    group = raw.get("cache_group")
    if group is not None and (not isinstance(group, str) or not group.strip()):
        raise KeysFileError(where + ".cache_group", "must be a non-empty string")
    own = _limits({k: v for k, v in raw.items() if k in LIMIT_FIELDS}, where)
    return KeyEntry(key, name.strip(), own.over(defaults), priority,
                    group.strip() if group is not None else None)


def _limits(raw: object, where: str) -> Limits:
    if not isinstance(raw, Mapping):
        raise KeysFileError(where, "expected an object of limits")
    _no_unknown(raw, LIMIT_FIELDS, where + ".")
    values: dict[str, Any] = {}
    for name in LIMIT_FIELDS:
        if name not in raw or raw[name] is None:
            continue
        value = raw[name]
        # bool is an int in Python: `rpm: true` is a mistake, not 1.
        least = 0 if name in STORE_FIELDS else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            what = "a non-negative" if least == 0 else "a positive"
            raise KeysFileError(f"{where}.{name}", f"must be {what} integer, got {value!r}")
        values[name] = value
    return Limits(**values)


def _no_unknown(raw: Mapping[Any, Any], known: tuple[str, ...], prefix: str) -> None:
    for name in raw:
        if name not in known:
            raise KeysFileError(f"{prefix}{name}",
                                f"unknown field (known: {', '.join(known)})")
