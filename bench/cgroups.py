"""CPU budgets for the benchmark's processes: one cgroup per process, each with a CPU quota.

Why: on a 2-core machine the simulator, Redis and the load generator need most of one core, so
`serve --workers 2` cannot show whether processes scale by giving the second process a core of
its own. A quota can: every proxy process gets the same fixed budget B (e.g. 0.4 core), all of
them inside core 0, so 1 process has B and 2 processes have 2B, and the row measures whether
throughput doubles with them. One cgroup per process, never one shared cgroup of 2B: a shared
one would let one process take all of it.

Where: cgroup v1's `cpu` controller (`cpu.cfs_period_us`, `cpu.cfs_quota_us`, `cpu.stat` with
`nr_throttled` and `throttled_time` in ns), or cgroup v2 (`cpu.max`, `cpu.stat` with
`throttled_usec`) when its `cpu` controller is enabled at the mount's root; the hierarchy is
found in /proc/mounts. Our groups live under one parent, `responses-proxy-bench-<our pid>`, so
several runs never collide and one `rmdir` pass removes them.

Clean-up, always: `Budgets` is a context manager; on every way out it moves the processes it
placed back to the hierarchy's root group (ignoring those that have exited) and removes its
groups. A group can only be removed once empty, which a moved-out or exited process leaves it.
A process forked inside a group stays there: a `serve --workers N` child that the supervisor
replaces lands in the supervisor's group (the supervisor is idle, so it shares that budget).

Pure parts (tested without cgroups): finding the hierarchy in a mounts table, the quota files
for a budget, parsing `cpu.stat`, the children of a pid in a /proc-like table.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal

PERIOD_US = 100_000  # the CFS period: the quota is granted (and throttled) per 100 ms
PARENT_PREFIX = "responses-proxy-bench-"

Version = Literal[1, 2]


@dataclass(frozen=True)
class Hierarchy:
    """A mounted cgroup hierarchy that has the `cpu` controller."""

    version: Version
    root: Path


def find_cpu_hierarchy(mounts: str) -> Hierarchy | None:
    """The cgroup hierarchy with the `cpu` controller in a /proc/mounts table: v1's `cpu`
    mount first (a hybrid host binds `cpu` there, and v2 then lacks it), else the v2 mount."""
    v2: Path | None = None
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        _, mount_point, fstype, options = parts[:4]
        if fstype == "cgroup" and "cpu" in options.split(","):
            return Hierarchy(1, Path(mount_point))
        if fstype == "cgroup2" and v2 is None:
            v2 = Path(mount_point)
    return Hierarchy(2, v2) if v2 is not None else None


def quota_files(version: Version, cores: float, period_us: int = PERIOD_US) -> dict[str, str]:
    """What to write into a group for a budget of `cores` (0.4: 40 ms per 100 ms period)."""
    if cores <= 0:
        raise ValueError("a CPU budget must be > 0 cores")
    quota = max(1000, round(cores * period_us))  # the kernel refuses quotas under 1 ms
    if version == 1:
        return {"cpu.cfs_period_us": str(period_us), "cpu.cfs_quota_us": str(quota)}
    return {"cpu.max": f"{quota} {period_us}"}


@dataclass(frozen=True)
class Throttling:
    """A group's `cpu.stat` counters: CFS periods with demand, periods in which the group ran
    out of quota, and the time it spent throttled (seconds)."""

    periods: int = 0
    throttled: int = 0
    throttled_s: float = 0.0

    def __sub__(self, before: Throttling) -> Throttling:
        return Throttling(self.periods - before.periods, self.throttled - before.throttled,
                          self.throttled_s - before.throttled_s)

    @property
    def throttled_pct(self) -> float | None:
        """Share of the periods that ended throttled (the budget was what bound the process)."""
        return 100.0 * self.throttled / self.periods if self.periods else None


def parse_cpu_stat(text: str) -> Throttling:
    """`cpu.stat` of v1 (`throttled_time`, ns) or v2 (`throttled_usec`)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            values[key] = int(value)
    if "throttled_usec" in values:
        seconds = values["throttled_usec"] / 1e6
    else:
        seconds = values.get("throttled_time", 0) / 1e9
    return Throttling(values.get("nr_periods", 0), values.get("nr_throttled", 0), seconds)


def children_in(stats: Mapping[int, bytes], parent: int) -> list[int]:
    """Pids whose `/proc/<pid>/stat` (given as raw bytes per pid) names `parent` as parent."""
    out = []
    for pid, raw in stats.items():
        fields = raw[raw.rfind(b")") + 2:].split()  # the name may hold spaces and parentheses
        if len(fields) > 1 and fields[1] == str(parent).encode():
            out.append(pid)
    return sorted(out)


def children(parent: int) -> list[int]:
    """The live child processes of `parent`, from /proc."""
    stats: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stats[int(entry.name)] = (entry / "stat").read_bytes()
    return children_in(stats, parent)


@dataclass
class Group:
    """One process's cgroup."""

    name: str
    path: Path
    pid: int
    cores: float

    def stat(self) -> Throttling:
        try:
            return parse_cpu_stat((self.path / "cpu.stat").read_text())
        except OSError:
            return Throttling()


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:  # one write() per value: the kernel parses each write alone
        f.write(value)


@dataclass
class Budgets:
    """Our cgroups under one parent; `limit` puts a process in a new group with a budget."""

    hierarchy: Hierarchy
    parent: Path = field(init=False)
    groups: list[Group] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.parent = self.hierarchy.root / f"{PARENT_PREFIX}{os.getpid()}"

    def __enter__(self) -> Budgets:
        self.parent.mkdir()
        if self.hierarchy.version == 2:
            # A v2 group's children get the cpu controller only if the group passes it down.
            _write(self.parent / "cgroup.subtree_control", "+cpu")
        return self

    def limit(self, name: str, pid: int, cores: float, period_us: int = PERIOD_US) -> Group:
        path = self.parent / name
        path.mkdir()
        group = Group(name, path, pid, cores)
        self.groups.append(group)  # before the writes: a half-made group is removed too
        for file, value in quota_files(self.hierarchy.version, cores, period_us).items():
            _write(path / file, value)
        _write(path / "cgroup.procs", str(pid))  # the whole process: every thread moves
        return group

    def close(self) -> None:
        """Move our processes back to the root group and remove every group (bounded: one
        pass; what cannot be removed is left, named in the error)."""
        leftover: list[str] = []
        for group in reversed(self.groups):
            for pid in _procs(group.path):
                with contextlib.suppress(OSError):  # it may have exited meanwhile
                    _write(self.hierarchy.root / "cgroup.procs", str(pid))
            _rmdir(group.path, leftover)
        self.groups.clear()
        _rmdir(self.parent, leftover)
        if leftover:
            raise RuntimeError("cgroups left behind: " + "; ".join(leftover))

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.close()
        except RuntimeError as leftover:
            if exc is None:
                raise
            exc.add_note(str(leftover))  # the error that got us here stays the one raised


def _procs(path: Path) -> list[int]:
    try:
        return [int(line) for line in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def unavailable(mounts_path: Path = Path("/proc/mounts")) -> str | None:
    """Why CPU budgets cannot be used here (None when they can): no cpu hierarchy, not root,
    v2 without its cpu controller, or a group cannot be made."""
    try:
        hierarchy = find_cpu_hierarchy(mounts_path.read_text())
    except OSError as exc:
        return f"cannot read {mounts_path}: {exc.strerror}"
    if hierarchy is None:
        return "no cgroup hierarchy is mounted"
    if os.geteuid() != 0:
        return "cgroups need root"
    if hierarchy.version == 2:
        try:
            enabled = (hierarchy.root / "cgroup.subtree_control").read_text().split()
        except OSError as exc:
            return f"cannot read {hierarchy.root}/cgroup.subtree_control: {exc.strerror}"
        if "cpu" not in enabled:
            return f"cgroup v2 at {hierarchy.root} does not have its cpu controller enabled"
    probe = hierarchy.root / f"{PARENT_PREFIX}{os.getpid()}-probe"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        return f"cannot make a cgroup under {hierarchy.root}: {exc.strerror}"
    return None


def hierarchy() -> Hierarchy:
    found = find_cpu_hierarchy(Path("/proc/mounts").read_text())
    if found is None:
        raise RuntimeError("no cgroup hierarchy with the cpu controller")
    return found


def _rmdir(path: Path, leftover: list[str]) -> None:
    """Remove an empty cgroup directory; one already gone is fine, any other failure is noted
    in `leftover`."""
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        leftover.append(f"{path}: {exc.strerror}")
