"""Where a document's text is read (core/documents.py), so that no document takes the event loop,
the default thread pool or unbounded CPU.

Plain text is read in a thread: decoding is linear and runs in C, bounded by the file's size.
A PDF is interpreted by pure Python whose cost its size does not bound (a 3 KB PDF cost a minute
of CPU), HTML by a pure-Python parser, JSON is checked by parsing it (its tree can take 24x its
text), and Python can neither stop a thread nor bound its memory: such a document is read in a
child process (services/files/extractchild.py), at most `processes` at once per proxy process
and half of them (rounded up) for one key's documents (a key sending costly files waits behind
its own; the other keys keep the rest), under `PdfLimits` and `cpu_seconds` of CPU (the kernel
ends a child past them). A child past its
CPU, past a wall-clock backstop, or whose caller went away (a cancelled request) is killed and
reaped, and a new one started when next needed: the work is abandoned, not left running.
Children that answered stay for the next document (starting one costs ~0.2 s of CPU).

Memory: a child's address space is bounded (`memory`); the parent holds the file and its text.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from proxy.core.documents import INVALID, Data, PdfLimits, Unreadable, extract_text, runs_long

CHILD = "proxy.services.files.extractchild"
# Wall-clock seconds a child may take beyond its CPU seconds (a loaded machine, a slow start).
SLACK = 10.0
DEFAULT_MEMORY = 512 * 1024 * 1024
# The child runs this process's own copy of the proxy, wherever it was imported from.
_ROOT = str(Path(__file__).resolve().parents[3])


class Extractor:
    def __init__(self, *, processes: int = 2, cpu_seconds: float = 10.0,
                 limits: PdfLimits | None = None, memory: int = DEFAULT_MEMORY) -> None:
        self.processes = processes
        self.cpu_seconds = cpu_seconds
        self.limits = limits or PdfLimits()
        self._memory = memory
        self._gate = asyncio.Semaphore(processes)
        # One key's documents take at most half the children (rounded up): a key sending
        # costly files waits behind its own, the other keys keep the rest.
        self.per_key = max(1, (processes + 1) // 2)
        self._shares: dict[str, _Share] = {}
        self._idle: list[asyncio.subprocess.Process] = []
        self.killed = 0  # children ended for overrunning or for a cancelled caller

    async def text(self, data: Data, filename: str | None, media_type: str | None, *,
                   chars: int | None = None, owner: str = "") -> str:
        """The text of `data`, or `Unreadable`. `chars`: the caller takes no more (a PDF's
        reading stops soon after; a longer text comes back and the caller refuses it).
        `owner`: the key whose document it is (its share of the children)."""
        if not runs_long(data, filename, media_type):
            return await asyncio.to_thread(extract_text, data, filename, media_type)
        share = self._shares.setdefault(owner, _Share(asyncio.Semaphore(self.per_key)))
        share.users += 1
        try:
            async with share.gate, self._gate:
                share.reading += 1
                try:
                    return await self._read(data, filename, media_type, chars)
                finally:
                    share.reading -= 1
        finally:
            share.users -= 1
            if not share.users:
                del self._shares[owner]

    def running(self, owner: str) -> int:
        """Documents of `owner` being read now (tests, metrics)."""
        share = self._shares.get(owner)
        return 0 if share is None else share.reading

    async def _read(self, data: Data, filename: str | None, media_type: str | None,
                    chars: int | None) -> str:
        child = self._idle.pop() if self._idle else await self._start()
        try:
            async with asyncio.timeout(self.cpu_seconds + SLACK):
                text = await self._ask(child, data, filename, media_type, chars)
        except Unreadable:
            self._idle.append(child)  # it answered: ready for the next document
            raise
        except BaseException as exc:
            await self._kill(child)
            if isinstance(exc, (TimeoutError, _ChildEnded)):
                raise Unreadable(INVALID, self._overrun(child)) from None
            raise
        self._idle.append(child)
        return text

    def _overrun(self, child: asyncio.subprocess.Process) -> str:
        # The child's exit status says which bound it met, when asyncio saw it: another waiter
        # on the process's children can reap it first (asyncio then reports 255), so the
        # message names both bounds rather than guess.
        limits = (f"{self.cpu_seconds:g} s of CPU and {self._memory // (1024 * 1024)} MiB of "
                  "memory")
        if child.returncode == -signal.SIGXCPU or child.returncode == -signal.SIGKILL:
            return (f"the file takes more than {self.cpu_seconds:g} s of CPU to read, more "
                    "than this server gives one document")
        return f"the file cannot be read within what this server gives one document ({limits})"

    async def aclose(self) -> None:
        while self._idle:
            await self._kill(self._idle.pop(), counted=False)

    async def _start(self) -> asyncio.subprocess.Process:
        path = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", CHILD, str(self._memory), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": path})

    async def _ask(self, child: asyncio.subprocess.Process, data: Data,
                   filename: str | None, media_type: str | None, chars: int | None) -> str:
        assert child.stdin is not None and child.stdout is not None
        limits = {**asdict(self.limits), "chars": chars}
        head = {"size": len(data), "filename": filename, "media_type": media_type,
                "cpu": self.cpu_seconds, **limits}
        try:
            child.stdin.write(orjson.dumps(head) + b"\n")
            child.stdin.write(data)
            await child.stdin.drain()
            answer = orjson.loads(await child.stdout.readline() or b"null")
            if not isinstance(answer, dict):
                raise _ChildEnded
            if not answer["ok"]:
                raise Unreadable(str(answer["code"]), str(answer["message"]))
            return (await child.stdout.readexactly(int(answer["size"]))).decode()
        except (ConnectionError, asyncio.IncompleteReadError, orjson.JSONDecodeError):
            raise _ChildEnded from None

    async def _kill(self, child: asyncio.subprocess.Process, *, counted: bool = True) -> None:
        # Shielded: a cancelled caller still leaves no child running nor unreaped.
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await asyncio.shield(child.wait())
        if counted:
            self.killed += 1


@dataclass
class _Share:
    """One key's documents: at most `per_key` read at once (`gate`); `users` waiting or
    reading (the entry goes with the last), `reading` now."""

    gate: asyncio.Semaphore
    users: int = 0
    reading: int = 0


class _ChildEnded(Exception):
    """The child closed its pipe mid-document: the kernel ended it (its CPU limit) or it
    crashed (its memory limit)."""
