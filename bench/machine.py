"""What the numbers were measured on: CPU, cores, kernel, Python, event loop, versions, commit.

Read once per run, from /proc/cpuinfo, `os`, `platform`, installed package metadata,
`redis-server --version` and `git` (read-only: `rev-parse` and `status --porcelain`, to say
whether the proxy's working tree had uncommitted changes when it was measured); and one figure
measured (`wake_cpu_us`): the CPU a process is charged for waking from a sleep. At 20 ms per
token a proxy idles between tokens, so each token pays a wake-up; on the 2-core VM these
numbers come from one costs ~20 µs after a 1 ms sleep and ~70-80 µs after a 14 ms one (a bare
`time.sleep` loop), the size of a token's whole Python work: per-token CPU moves with it from
machine to machine, and with how often the proxy idles.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import platform
import shutil
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("uvicorn", "starlette", "httpx", "sse-starlette", "orjson", "redis", "uvloop",
            "httptools")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _run(args: list[str], cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=10, cwd=cwd,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def source_digests(package: Path) -> dict[str, str]:
    """sha256 (12 hex) of every .py file under `package`, by relative path: the code a process
    started now would load. Other engineers edit proxy/ (and mutation tests rewrite it for a
    while), so the run records what it measured and whether it changed meanwhile."""
    out: dict[str, str] = {}
    for path in sorted(package.rglob("*.py")):
        try:
            out[str(path.relative_to(package.parent))] = hashlib.sha256(
                path.read_bytes()).hexdigest()[:12]
        except OSError:
            continue
    return out


def digest(files: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{k}={v};" for k, v in files.items()).encode()).hexdigest()[:12]


# Sleeps `wake_cpu_us` measures: (seconds, how many), ~0.8 s in all.
WAKE_SLEEPS = ((0.001, 100), (0.0137, 50))


def wake_cpu_us(seconds: float, count: int) -> float:
    """CPU µs this process is charged per wake-up from a `seconds` sleep (the mean of `count`)."""
    started = time.process_time()
    for _ in range(count):
        time.sleep(seconds)
    return (time.process_time() - started) / count * 1e6


def describe(root: Path) -> dict[str, Any]:
    redis_exe = shutil.which("redis-server")
    commit = _run(["git", "rev-parse", "--short", "HEAD"], cwd=root)
    dirty = bool(_run(["git", "status", "--porcelain", "--", "proxy"], cwd=root))
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": sorted(os.sched_getaffinity(0)),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "packages": {p: _version(p) for p in PACKAGES},
        "redis": _run([redis_exe, "--version"]) if redis_exe else "not installed",
        "commit": commit + (" + uncommitted changes in proxy/" if dirty else ""),
        "wake_cpu_us": {f"{seconds * 1000:g}ms": round(wake_cpu_us(seconds, count), 1)
                        for seconds, count in WAKE_SLEEPS},
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
