"""The architecture shows in `ls`: no package of `proxy/` keeps more than
`MAX_FLAT` modules beside its subpackages. A room that grows past it is split by concept
(tools, vectors, policy, ...) rather than left as a long flat listing a newcomer must read whole.
"""

from __future__ import annotations

from pathlib import Path

PROXY = Path(__file__).resolve().parents[2] / "proxy"
MAX_FLAT = 12


def flat_modules(package: Path) -> list[str]:
    """The modules directly in `package`, its `__init__.py` aside."""
    return sorted(p.name for p in package.glob("*.py") if p.name != "__init__.py")


def packages(root: Path) -> list[Path]:
    return [root, *sorted(p.parent for p in root.rglob("*/__init__.py"))]


def test_no_package_has_more_than_twelve_flat_modules() -> None:
    crowded = {str(p.relative_to(PROXY.parent)): len(flat_modules(p)) for p in packages(PROXY)
               if len(flat_modules(p)) > MAX_FLAT}
    assert crowded == {}, f"packages with more than {MAX_FLAT} flat modules: group them"


def test_every_folder_with_modules_is_a_package() -> None:
    # A folder of modules without `__init__.py` would escape the count above.
    loose = [str(p.relative_to(PROXY.parent)) for p in PROXY.rglob("*")
             if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py"))
             and not (p / "__init__.py").exists()]
    assert loose == []


def test_the_count_sees_a_crowded_package(tmp_path: Path) -> None:
    package = tmp_path / "room"
    (package / "sub").mkdir(parents=True)
    for name in ["__init__", *(f"m{i}" for i in range(MAX_FLAT + 1))]:
        (package / f"{name}.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "inner.py").write_text("")
    assert len(flat_modules(package)) == MAX_FLAT + 1
    assert packages(package) == [package, package / "sub"]
