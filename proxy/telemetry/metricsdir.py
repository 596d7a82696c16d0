"""One `/metrics` per instance under `serve --workers N` (a scrape sees the instance, not one
child): prometheus_client's multiprocess mode, set up by the supervisor (prefork.py) in a directory
of its own.

- The supervisor makes a private temporary directory before forking (`MetricsDir.create`),
  names it in `PROMETHEUS_MULTIPROC_DIR` for its children, forgets a dead child's live gauges
  (`child_exited`: its counters and histograms stay, so sums never go backwards) and removes
  the directory when it exits. A fresh directory per start: nothing of a previous run counts.
- Each child, before it builds its app, switches prometheus_client to values in files
  (`enable_in_child`): every counter and histogram sample is then a locked write into this
  process's mmap'd file instead of a locked float, and a scrape, whichever process takes it,
  merges every process's file (metrics.py `Metrics(multiprocess=True)`).

The switch is the library's process-wide value class: set once, in a forked child that runs
nothing else, before any metric exists. A single-process `serve` never sets it (its samples
stay plain floats).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from prometheus_client import multiprocess, values

ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    """The directory of this process's instance when it runs multiprocess mode: set up by
    the supervisor and switched on in this process (a variable inherited by a single-process
    `serve` alone would otherwise send every sample to files nobody writes)."""
    path = os.environ.get(ENV)
    enabled = bool(getattr(values.ValueClass, "_multiprocess", False))
    return path if enabled and path and os.path.isdir(path) else None


class ProcessId:
    """This process's pid, read once and again in a forked child. prometheus_client's
    multiprocess values ask for the pid on every sample update (to notice a fork): with its
    default, `os.getpid`, a getpid syscall per update, ~12 per request."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self.pid = os.getpid()

    def get(self) -> int:
        return self.pid


def enable_in_child() -> None:
    """In a forked child, before its app: samples go to this process's files from now on."""
    path = os.environ.get(ENV)
    if path and os.path.isdir(path):
        values.ValueClass = values.MultiProcessValue(  # type: ignore[no-untyped-call]
            process_identifier=ProcessId().get)


class MetricsDir:
    """The supervisor's side: the directory's life, and its dead children's gauges."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def create(cls) -> MetricsDir:
        path = tempfile.mkdtemp(prefix="responses-proxy-metrics-")
        os.environ[ENV] = path  # the children inherit it at fork
        return cls(path)

    def child_exited(self, pid: int) -> None:
        # Its live gauges (open streams, in-flight, the process count) stop counting; its
        # counters' and histograms' files stay, so the instance's totals keep what it did.
        with contextlib.suppress(OSError):
            multiprocess.mark_process_dead(pid, self.path)  # type: ignore[no-untyped-call]

    def remove(self) -> None:
        if os.environ.get(ENV) == self.path:
            del os.environ[ENV]
        shutil.rmtree(self.path, ignore_errors=True)
