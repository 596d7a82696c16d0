"""`serve --workers N`: N serving processes on one port, under a small supervisor.

Why processes: one asyncio loop uses one core; a host with 16 cores would otherwise serve from
one of them. Every process is a whole proxy (its own loop, upstream pool, Redis connections,
in-process background worker, event-log flusher); they share nothing but Redis, which is why
more than one needs `--redis-url` (the embedded store lives in one process's memory).
What crosses processes already goes through Redis: a follower on process A of a stream made by
process B reads B's event log; a cancel writes the job's state, which B's worker sees; jobs
are taken through the consumer group, one consumer per process (services/jobs/runner.py names each
consumer with its pid).

How the port is shared: the supervisor binds one listening socket per child with
`SO_REUSEPORT` (Linux spreads new connections over them by a hash of the 4-tuple, so each
process gets an even share of the keep-alive connections whatever their load) and forks the
children, each keeping only its own socket. The supervisor keeps every socket open: a child
that dies is replaced on the same socket, and connections waiting in that socket's backlog are
served by the new child instead of being reset. Where `SO_REUSEPORT` is missing, all children
share one socket (the kernel hands each connection to whichever process accepts first).

Forking happens before anything asynchronous exists (no loop, no thread, no client): each
child builds its app from the settings after the fork. Each child runs in a process group of
its own, so a terminal's Ctrl-C reaches the supervisor only and each child gets exactly one
signal: the supervisor forwards SIGTERM/SIGINT once (the child drains, server.py), a second
signal forwards again (the child skips the rest of its drain). The supervisor waits for every
child up to `stop_timeout`, then SIGKILLs what is left. A child that sees its supervisor gone
(its parent pid changed) drains and exits too, so a SIGKILLed supervisor leaves no orphans.

A child that exits while nobody asked it to is replaced, at most `MAX_RESTARTS` times per
`RESTART_WINDOW` seconds; past that the supervisor stops the others and exits non-zero (a
child that cannot start, e.g. a bad Redis, must not become a fork loop).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("proxy")

MAX_RESTARTS = 5
RESTART_WINDOW = 60.0
POLL = 0.1


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` sockets bound to host:port with SO_REUSEPORT (one shared socket without it)."""
    reuse_port = hasattr(socket, "SO_REUSEPORT")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets: list[socket.socket] = []
    try:
        for _ in range(count if reuse_port else 1):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(2048)
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets if reuse_port else sockets * count


class ProcessSupervisor:
    """Forks `count` children running `serve(sock, parent_pid)`; forwards stop signals."""

    def __init__(self, count: int, sockets: list[socket.socket],
                 serve: Callable[[socket.socket, int], int], *, stop_timeout: float,
                 exited: Callable[[int], None] | None = None) -> None:
        self.count = count
        self.exited = exited  # told each child's pid once it is reaped (metricsdir.py)
        self.sockets = sockets
        self.serve = serve
        self.stop_timeout = stop_timeout
        self.children: dict[int, int] = {}  # pid -> slot (index of its socket)
        self.signals: list[int] = []  # stop signals received, handled by the main loop
        self.hangups = 0  # SIGHUPs received and not forwarded yet (keys-file reloads)
        self.restarts: list[float] = []
        self.failed = False

    # -- children ----------------------------------------------------------------------------
    def spawn(self, slot: int) -> None:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the supervisor's code
            code = 1
            try:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)
                # Ignored until the child's runtime takes it (a keys-file reload, runtime.py):
                # by default a SIGHUP would end the process.
                signal.signal(signal.SIGHUP, signal.SIG_IGN)
                os.setpgid(0, 0)  # a terminal's Ctrl-C goes to the supervisor only
                for index, sock in enumerate(self.sockets):
                    if index != slot and sock is not self.sockets[slot]:
                        sock.close()
                code = self.serve(self.sockets[slot], parent)
            except BaseException:  # a child must end here (os._exit), whatever happened
                log.exception("worker process %d failed", os.getpid())
            finally:
                logging.shutdown()
                os._exit(code)
        self.children[pid] = slot
        log.info("worker process %d started (slot %d)", pid, slot)

    def _reap(self) -> list[tuple[int, int, int]]:
        """(pid, slot, exit code) of every child that ended since the last call."""
        ended: list[tuple[int, int, int]] = []
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                break
            if pid == 0:
                break
            slot = self.children.pop(pid, None)
            if self.exited is not None:
                self.exited(pid)
            if slot is not None:
                ended.append((pid, slot, os.waitstatus_to_exitcode(status)))
        return ended

    def _forward(self, sig: int) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    # -- the supervisor's loop -----------------------------------------------------------------
    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        self.signals.append(sig)  # only a list append in a handler; the loop does the rest

    def _on_hangup(self, sig: int, frame: FrameType | None) -> None:
        self.hangups += 1

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._on_hangup)
        try:
            for slot in range(self.count):
                self.spawn(slot)
            self._supervise()
            return self._stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for sock in {id(s): s for s in self.sockets}.values():
                sock.close()

    def _supervise(self) -> None:
        while not self.signals and not self.failed:
            for pid, slot, code in self._reap():
                self._replace(pid, slot, code)
            if self.hangups:  # each child reads the keys file again
                self.hangups = 0
                self._forward(signal.SIGHUP)
            time.sleep(POLL)

    def _replace(self, pid: int, slot: int, code: int) -> None:
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < RESTART_WINDOW]
        if len(self.restarts) >= MAX_RESTARTS:
            log.error("worker process %d exited with %d; %d restarts within %.0f s: stopping",
                      pid, code, len(self.restarts), RESTART_WINDOW)
            self.failed = True
            return
        self.restarts.append(now)
        log.error("worker process %d exited with %d unasked: starting another", pid, code)
        self.spawn(slot)

    def _stop(self) -> int:
        """Forward the stop (or, after a failure, SIGTERM) and wait, bounded, for every child."""
        forwarded = 0
        codes: list[int] = []
        deadline = time.monotonic() + self.stop_timeout
        while self.children and time.monotonic() < deadline:
            wanted = len(self.signals) if self.signals else 1
            while forwarded < min(wanted, 2):  # the first signal drains, a second cuts short
                sig = self.signals[forwarded] if self.signals else signal.SIGTERM
                self._forward(sig)
                forwarded += 1
            codes.extend(code for _pid, _slot, code in self._reap())
            time.sleep(POLL)
        if self.children:
            log.error("%d worker process(es) still running after %.0f s: killing them",
                      len(self.children), self.stop_timeout)
            self._forward(signal.SIGKILL)
            for pid in list(self.children):
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            self.children.clear()
            return 1
        return 1 if self.failed or any(code != 0 for code in codes) else 0
