"""The import layers: which room of `proxy/` may import which.

Every module's imports are read from its syntax tree (top level, inside functions, under
`if TYPE_CHECKING:`), so an import hidden from the start-up path still counts. The rules are
data: `ROOMS` says which modules a room holds (longest prefix wins), `MAY_IMPORT` what each room
may import, and `EXCEPTIONS` today's known crossings, each with why it stands. Moving a module
changes a row of `ROOMS`, not the check. Each room's `__init__.py` says the same in words.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PROXY = Path(__file__).resolve().parents[2] / "proxy"

# Module prefix -> room. A root module that names no room fails `test_every_module_has_a_room`:
# a newcomer adding one decides where it lives.
ROOMS: dict[str, str] = {
    "proxy": "package",  # the package itself: its version string, importable by every room
    "proxy.core": "core",
    "proxy.store": "store",
    "proxy.settings": "settings",
    "proxy.services": "services",
    "proxy.web": "web",
    "proxy.simulator": "simulator",
    # Adapters: I/O to the outside (replicas, MCP servers, the search endpoint, clients' URLs).
    "proxy.upstream": "adapters",
    # Telemetry: adapters every serving layer reports through.
    "proxy.telemetry": "telemetry",
    # The composition root: builds the services and the app from the settings.
    "proxy.runtime": "composition",
    "proxy.app": "composition",
    # Entry points and the process around the app (uvicorn's protocols, the collector's tuning).
    "proxy.cli": "entry",
    "proxy.__main__": "entry",
    "proxy.process": "entry",
}

_BELOW_COMPOSITION = {"package", "core", "settings", "store", "adapters", "telemetry",
                      "services", "web", "simulator"}

# Room -> the other rooms it may import (its own room always).
MAY_IMPORT: dict[str, set[str]] = {
    "package": set(),
    "core": {"package"},
    "settings": {"package", "core"},
    "store": {"package", "core"},
    # The simulator stands in for vLLM: sharing the proxy's code would let one bug hide on
    # both sides of the wire.
    "simulator": set(),
    "telemetry": {"package", "core", "settings"},
    "adapters": {"package", "core", "settings", "telemetry"},
    # A service takes the settings groups it uses (never the whole `Settings` or `Runtime`).
    "services": {"package", "core", "settings", "store", "adapters", "telemetry"},
    # The web layer reads limits from the settings and reports through telemetry; it reaches
    # stores and upstreams only through services.
    "web": {"package", "core", "settings", "services", "telemetry"},
    "composition": _BELOW_COMPOSITION,
    "entry": _BELOW_COMPOSITION | {"composition"},
}

# (importing module, imported module) -> why the crossing stands for now. Fix one, delete its
# row: `test_no_stale_exception` fails on a row nothing needs any more.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def room_of(module: str) -> str | None:
    """The room of a `proxy` module by its longest listed prefix; None outside `proxy`."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        room = ROOMS.get(".".join(parts[:end]))
        if room is not None:
            return room
    return None


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool) -> set[str]:
    """Every module `source` imports, anywhere in its tree, relative imports resolved.

    `from a import b` yields `a` and `a.b` (b may be a submodule); the room of `a.b` falls back
    to `a`'s when `b` is a name, so the pair never widens what is allowed.
    """
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def read_imports(root: Path) -> dict[str, set[str]]:
    return {
        module_name(path, root): imported_modules(
            path.read_text(encoding="utf-8"), module_name(path, root), path.name == "__init__.py")
        for path in sorted(root.rglob("*.py"))
    }


def crossings(imports: Mapping[str, Iterable[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs that cross into a room the importer's room may not import."""
    found = []
    for module, targets in imports.items():
        source = room_of(module)
        assert source is not None, f"{module} has no room in ROOMS"
        for target in targets:
            room = room_of(target)
            if room is None or room == source or room in MAY_IMPORT[source]:
                continue
            found.append((module, _listed_name(target, imports)))
    return sorted(set(found))


def _listed_name(target: str, imports: Mapping[str, Iterable[str]]) -> str:
    # `from proxy.runtime import Runtime` names the module, not `proxy.runtime.Runtime`.
    name = target
    while name not in imports and "." in name:
        name = name.rpartition(".")[0]
    return name if name in imports else target


@pytest.fixture(scope="module")
def imports() -> dict[str, set[str]]:
    return read_imports(PROXY)


def test_every_module_has_a_room(imports: dict[str, set[str]]) -> None:
    assert [module for module in imports if room_of(module) is None] == []


def test_no_import_crosses_a_layer(imports: dict[str, set[str]]) -> None:
    new = [pair for pair in crossings(imports) if pair not in EXCEPTIONS]
    assert new == [], "imports crossing a layer (ROOMS, MAY_IMPORT in tests/unit/test_layers.py)"


def test_no_stale_exception(imports: dict[str, set[str]]) -> None:
    assert sorted(set(EXCEPTIONS) - set(crossings(imports))) == []


def test_a_forbidden_import_is_caught_wherever_it_hides() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import ids\n"
        "if TYPE_CHECKING:\n"
        "    from proxy.store.redis import RedisStore\n"
        "def later():\n"
        "    import proxy.web.middleware.auth\n"
        "    from ..services.jobs import runner\n"
    )
    found = imported_modules(source, "proxy.core.synthetic", is_package=False)
    imports = {"proxy.core.synthetic": found, "proxy.core.ids": set(),
               "proxy.store.redis": set(), "proxy.web.middleware.auth": set(),
               "proxy.services.jobs.runner": set()}
    assert crossings(imports) == [
        ("proxy.core.synthetic", "proxy.services.jobs"),
        ("proxy.core.synthetic", "proxy.services.jobs.runner"),
        ("proxy.core.synthetic", "proxy.store.redis"),
        ("proxy.core.synthetic", "proxy.web.middleware.auth"),
    ]


def test_an_allowed_import_is_not_reported() -> None:
    imports = {"proxy.services.jobs.runner": {"proxy.store.redis", "proxy.core.ids"},
               "proxy.store.redis": {"proxy.core.ids"}, "proxy.core.ids": set()}
    assert crossings(imports) == []


def test_a_room_reaching_up_is_reported() -> None:
    imports = {"proxy.store.redis": {"proxy.services", "proxy.services.jobs"},
               "proxy.services.jobs": set(), "proxy.services": set()}
    assert crossings(imports) == [("proxy.store.redis", "proxy.services"),
                                  ("proxy.store.redis", "proxy.services.jobs")]
