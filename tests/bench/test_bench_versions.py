"""`python -m bench.versions`: an earlier commit's proxy beside this tree's, one simulator.

The run itself is the servers test's machinery; here what is new: the baseline is the earlier
commit's code (not this tree's, which the editable install would otherwise import), a launcher
refuses a tree whose package `import proxy` does not find (`tree_env`: bench.wsloop started its
baseline before exporting it, and compared this tree with itself), and both proxies serve the
short load with every stream checked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.versions import ROOT, export, tree_env

pytestmark = pytest.mark.e2e


def _has_history() -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD~1"],
                          capture_output=True).returncode == 0


@pytest.mark.skipif(not _has_history(), reason="needs the git history")
def test_the_baseline_runs_its_own_code(tmp_path: Path) -> None:
    commit = export("HEAD~1", tmp_path)
    assert (tmp_path / "proxy" / "__init__.py").is_file()
    found = subprocess.run([sys.executable, "-c", "import proxy; print(proxy.__file__)"],
                           cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)},
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(found).resolve() == (tmp_path / "proxy" / "__init__.py").resolve(), commit
    assert tree_env(tmp_path, os.environ)["PYTHONPATH"] == str(tmp_path)


def test_a_tree_without_its_package_is_refused(tmp_path: Path) -> None:
    """An empty folder on PYTHONPATH: `import proxy` finds the installed tree, this one."""
    with pytest.raises(RuntimeError, match="not that tree's package"):
        tree_env(tmp_path, os.environ)


@pytest.mark.bench_rows
@pytest.mark.skipif(shutil.which("redis-server") is None or not _has_history(),
                    reason="needs redis-server and the git history")
def test_both_proxies_serve_the_short_load_without_errors() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.versions", "--baseline", "HEAD~1", "--loads", "short",
         "--rounds", "1", "--seconds", "0.5"],
        capture_output=True, text=True, timeout=80, check=True).stdout
    rows = [cells for cells in (line.split("|") for line in out.splitlines())
            if len(cells) > 3 and cells[1].strip() == "short"]
    assert [cells[2].strip() for cells in rows] == ["current", rows[1][2].strip()], out
    assert len(rows) == 2, out
    for cells in rows:
        assert float(cells[3]) > 0, out  # proxy CPU per 1k tokens was measured
        assert int(cells[8]) == 0, out  # no errors: every stream checked whole
