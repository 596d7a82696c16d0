"""bench/cgroups.py: the pure parts (the hierarchy in a mounts table, quota files, `cpu.stat`,
children in a /proc table), then real groups where this machine lets us make them (root with a
writable cpu hierarchy; skipped elsewhere): a busy process under a small quota is throttled,
and every group is gone afterwards, also when the block raised."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench import cgroups
from bench.cgroups import Hierarchy, Throttling

HYBRID = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
"""
COMBINED = "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
PURE_V2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"


def test_the_cpu_hierarchy_is_found_in_the_mounts_table() -> None:
    # v1's cpu mount wins on a hybrid host (v2 then has no cpu controller); cpuacct alone
    # is not it.
    assert cgroups.find_cpu_hierarchy(HYBRID) == Hierarchy(1, Path("/sys/fs/cgroup/cpu"))
    assert cgroups.find_cpu_hierarchy(COMBINED) == Hierarchy(
        1, Path("/sys/fs/cgroup/cpu,cpuacct"))
    assert cgroups.find_cpu_hierarchy(PURE_V2) == Hierarchy(2, Path("/sys/fs/cgroup"))
    assert cgroups.find_cpu_hierarchy("proc /proc proc rw 0 0\n") is None
    assert cgroups.find_cpu_hierarchy("") is None


def test_quota_files_for_a_budget() -> None:
    assert cgroups.quota_files(1, 0.4) == {"cpu.cfs_period_us": "100000",
                                           "cpu.cfs_quota_us": "40000"}
    assert cgroups.quota_files(2, 0.25) == {"cpu.max": "25000 100000"}
    assert cgroups.quota_files(1, 1.5, period_us=50_000)["cpu.cfs_quota_us"] == "75000"
    assert cgroups.quota_files(2, 0.0001) == {"cpu.max": "1000 100000"}  # the kernel's floor
    with pytest.raises(ValueError, match="budget"):
        cgroups.quota_files(1, 0)


def test_cpu_stat_of_both_versions_and_its_differences() -> None:
    v1 = cgroups.parse_cpu_stat("nr_periods 40\nnr_throttled 30\nthrottled_time 1500000000\n"
                                "nr_bursts 0\nburst_time 0\n")
    assert v1 == Throttling(40, 30, 1.5)
    v2 = cgroups.parse_cpu_stat("usage_usec 900\nuser_usec 800\nsystem_usec 100\n"
                                "nr_periods 10\nnr_throttled 5\nthrottled_usec 250000\n")
    assert v2 == Throttling(10, 5, 0.25)
    delta = v1 - Throttling(20, 20, 1.0)
    assert delta == Throttling(20, 10, 0.5) and delta.throttled_pct == 50.0
    assert Throttling().throttled_pct is None
    assert cgroups.parse_cpu_stat("garbage\n") == Throttling()


def test_children_are_read_from_the_parent_field() -> None:
    stats = {
        10: b"10 (python) S 1 10 10 0",
        11: b"11 (py (worker) 1) S 10 10 10 0",  # a name with spaces and parentheses
        12: b"12 (python) R 10 10 10 0",
        13: b"13 (other) S 110 13 13 0",  # 110 starts with "1" and "10": not a child of 10
        14: b"14 (x",  # torn read: ignored
    }
    assert cgroups.children_in(stats, 10) == [11, 12]
    assert cgroups.children_in(stats, 1) == [10]
    assert cgroups.children_in(stats, 99) == []


def test_why_budgets_are_unavailable_is_one_line(tmp_path: Path) -> None:
    assert cgroups.unavailable(tmp_path / "missing").startswith("cannot read")
    mounts = tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw 0 0\n")
    assert cgroups.unavailable(mounts) == "no cgroup hierarchy is mounted"


# -- real groups -------------------------------------------------------------------------------

REASON = cgroups.unavailable()
needs_cgroups = pytest.mark.skipif(REASON is not None, reason=f"no CPU cgroups: {REASON}")

BUSY = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end:\n    pass\n"


@pytest.fixture
def busy() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


def _eventually(check: Callable[[], bool], tries: int = 400, interval: float = 0.05) -> bool:
    """Polls `check`, at most `tries` times `interval` (a bound, not a speed claim)."""
    for _ in range(tries):
        if check():
            return True
        time.sleep(interval)
    return False


def _ours(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.name.startswith(f"{cgroups.PARENT_PREFIX}{os.getpid()}")]


@needs_cgroups
def test_a_busy_process_under_a_quota_is_throttled_and_the_groups_go(
        busy: subprocess.Popen[bytes]) -> None:
    hierarchy = cgroups.hierarchy()
    with cgroups.Budgets(hierarchy) as budgets:
        group = budgets.limit("busy", busy.pid, 0.05)
        assert str(busy.pid) in (group.path / "cgroup.procs").read_text().split()
        files = cgroups.quota_files(hierarchy.version, 0.05)
        for name, value in files.items():
            assert (group.path / name).read_text().split() == value.split()
        assert _eventually(lambda: group.stat().throttled > 0)
        assert group.stat().throttled_s > 0
    assert _ours(hierarchy.root) == []
    assert busy.poll() is None  # moved back to the root group, still running


@needs_cgroups
def test_groups_are_removed_when_the_block_raises(busy: subprocess.Popen[bytes]) -> None:
    hierarchy = cgroups.hierarchy()
    with pytest.raises(RuntimeError, match="boom"), cgroups.Budgets(hierarchy) as budgets:
        budgets.limit("a", busy.pid, 0.5)
        raise RuntimeError("boom")
    assert _ours(hierarchy.root) == []
