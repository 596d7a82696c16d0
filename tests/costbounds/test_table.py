"""The cost-bounds table in code (table.py) and in docs/SECURITY.md agree, and every
row names a test that exists: a new route joins both, or this fails. No servers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.costbounds import table

pytestmark = pytest.mark.costbounds

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "SECURITY.md"


def _tests_in(module: str) -> set[str]:
    tree = ast.parse((Path(__file__).parent / f"{module}.py").read_text())
    return {node.name for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_the_doc_carries_the_table_in_code() -> None:
    text = DOC.read_text()
    assert table.BEGIN in text and table.END in text, f"{DOC.name} lost its table markers"
    assert table.with_table(text) == text, (
        f"{DOC.name} differs from tests/costbounds/table.py: `python -m tests.costbounds.table` "
        "rewrites it")


def test_every_row_has_its_test_and_every_case_its_row() -> None:
    cases = {row.case: row for row in table.ROWS}
    assert len(cases) == len(table.ROWS), "two rows name one test"
    fast, heavy = _tests_in("test_fast"), _tests_in("test_heavy")
    for row in table.ROWS:
        assert row.case in (fast if row.fast else heavy), f"{row.test} does not exist"
    assert (fast | heavy) == set(cases), f"tests without a row: {(fast | heavy) - set(cases)}"
