"""The background worker: takes jobs from the queue and runs their generations into their logs.

A job's life, one compare-and-set at each step (statuses are final once terminal):

    queued ──take──▶ [CAS queued→in_progress] ──upstream──▶ run ──▶ completed|incomplete|failed
      │                     │ refused (cancelled meanwhile): close the log if nobody did, ack
      └─ cancel ──▶ cancelled (the cancelling instance closes the log)
    in_progress ── cancel ──▶ cancelled: the owner stops its upstream and closes the log

Liveness. A worker keeps the queue entries of its running jobs "fresh" (`keep_alive` every
`heartbeat` seconds resets their idle time, only for entries it still owns); that is the
heartbeat. Every worker also reclaims entries idle longer than 2.5 heartbeats, which only a
dead worker leaves behind, so a crashed job is picked up within 3 heartbeat intervals:
- still `queued` (taken, never started): simply run here;
- `in_progress` (it may have reached the upstream): closed as `failed` with a clear error, the
  log completed from where it stopped (`Assembler.restore`); never run twice, never stuck;
- `cancelled` with an unclosed log: the log is closed; a cancelled job is never resurrected.

Shutdown (`stop`), in phases: stop taking jobs; let running ones finish within the grace
period; fail what is still running ("the worker shut down"), hand back what never started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from proxy.core import types as t
from proxy.core.context.requestctx import CURRENT, RequestContext
from proxy.core.context.tracecontext import accept_traceparent
from proxy.core.errors import ProxyError, StoreUnavailable, failure_cause
from proxy.core.events.assembler import Assembler
from proxy.core.ids import new_id
from proxy.services.generation.builder import Generations
from proxy.services.generation.run import Generation
from proxy.services.generation.spec import JobSpec
from proxy.services.jobs.kinds import kind_of
from proxy.services.metering.limits import Limiter
from proxy.services.metering.meter import Meter, turn_spent
from proxy.services.process.loops import LoopSupervisor
from proxy.services.vectors.ingest import KIND as INGESTION
from proxy.settings import JobSettings
from proxy.store.base import Job, JobQueue, ResponseRecord
from proxy.telemetry.metrics import JobOutcome

log = logging.getLogger("proxy.process.worker")

LOST = "the worker running this response stopped before it finished"
SHUTDOWN = "the worker shut down before this response finished"
# How long an empty take waits for a poke when the store cannot block (the embedded store).
EMBEDDED_POLL = 0.2
# A job's end as `proxy_jobs_total{outcome}` (requeued is counted where a job is handed back).
_OUTCOMES: dict[str, JobOutcome] = {t.S_COMPLETED: "completed", t.S_FAILED: "failed",
                                    t.S_CANCELLED: "cancelled", t.S_INCOMPLETE: "incomplete"}


@dataclass
class _Running:
    job: Job
    task: asyncio.Task[None]
    generation: Generation | None = None
    # No longer ours to finish: reclaimed by another worker (we were presumed dead), or handed
    # back to the queue. The entry is then not acknowledged by us.
    released: bool = False
    # The job's work is over (its entry is being acknowledged): a heartbeat racing the ack may
    # find the entry gone, which is not a loss.
    finished: bool = False


def worker_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{new_id('w')[-8:]}"


class Worker:
    def __init__(self, queue: JobQueue, generations: Generations, jobs: JobSettings, *,
                 ttl: int, name: str | None = None, shared: bool = True,
                 supervisor: LoopSupervisor | None = None, limits: Limiter | None = None,
                 ingest: Callable[[bytes], Awaitable[None]] | None = None) -> None:
        """`generations`: the process's one builder of a job's generation
        (services/generation/builder.py); this class only takes, runs, heartbeats, reclaims and
        acknowledges. `jobs`: its concurrency and heartbeat; `ttl`: a stored response's
        (`--response-ttl`), renewed when a job starts."""
        self.name = name or worker_name()
        self._queue, self._generations, self._jobs, self._ttl = queue, generations, jobs, ttl
        self._store, self._tasks = generations.store, generations.tasks
        self._metrics = generations.metrics
        # `shared`: the queue lives in a Redis other processes use. The embedded store is
        # private to this process: its reads cannot block (we poll, woken by `poke`) and cancels
        # need no broadcast (`cancel_local` is called directly).
        self._blocking = shared
        self._shared = shared
        self._running: dict[str, _Running] = {}
        self._stopping = False
        self._poked = asyncio.Event()
        self._stop = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._supervisor = supervisor or LoopSupervisor()
        # Per-key limits: a job created by a limited key holds a stream slot while it runs
        # here and counts its tokens when it ends (the spec's `limit`, services/metering/limits.py).
        self._limits = limits
        # The second job kind on the queue: a vector store file's ingestion
        # (services/vectors/ingest.py), run here instead of a generation.
        self._ingest = ingest

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._loops = [
            self._supervisor.start("worker-take", self._take_loop),
            self._supervisor.start("worker-heartbeat", self._heartbeat_loop),
        ]
        if self._shared:
            self._loops.append(self._supervisor.start("worker-cancels", self._cancel_loop))
        log.info("worker %s: up to %d jobs at once", self.name,
                 self._jobs.concurrency)

    def poke(self) -> None:
        """A job was just queued by this process: look now."""
        self._poked.set()

    def cancel_local(self, response_id: str) -> None:
        """A response was just cancelled by this process: stop it now if it runs here."""
        running = self._running.get(response_id)
        if running is not None:
            running.task.cancel()

    @property
    def running(self) -> int:
        return len(self._running)

    async def stop(self, grace: float) -> None:
        # 1. stop taking jobs (every loop ends at its next pass)
        self._stopping = True
        self._stop.set()
        self._poked.set()
        # 2. let running jobs finish within the grace period
        pending = [r.task for r in self._running.values()]
        if pending:
            log.info("worker %s: waiting up to %.0fs for %d job(s)", self.name, grace,
                     len(pending))
            await asyncio.wait(pending, timeout=grace)
        # 3. fail what still runs: a generation cannot move to another worker mid-stream
        for running in list(self._running.values()):
            if running.generation is not None:
                running.generation.stop(SHUTDOWN)
            running.task.cancel()
        leftover = [r.task for r in self._running.values()]
        if leftover:
            await asyncio.wait(leftover, timeout=5.0)
        # 4. the loops themselves: they see `_stopping` at their next pass; cancelling is the
        # fast path, but not relied on (fakeredis can swallow a cancellation mid-command)
        for loop in self._loops:
            loop.cancel()
        if self._loops:  # none when it never started (asyncio.wait refuses an empty set)
            await asyncio.wait(self._loops, timeout=3.0)

    # -- taking ----------------------------------------------------------------------------------
    async def _take_loop(self) -> None:
        concurrency = self._jobs.concurrency
        while not self._stopping:
            free = concurrency - len(self._running)
            if free <= 0:
                await self._wait_poke(1.0)
                continue
            try:
                jobs = await self._queue.take(self.name, free,
                                              block_ms=1000 if self._blocking else 0)
            except StoreUnavailable as exc:
                log.warning("worker %s: queue unavailable: %s", self.name, failure_cause(exc))
                await self._wait_poke(1.0)
                continue
            for job in jobs:
                self._launch(job)
            if not jobs and not self._blocking:
                await self._wait_poke(EMBEDDED_POLL)

    async def _wait_poke(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._poked.wait(), timeout)
        self._poked.clear()

    def _launch(self, job: Job) -> None:
        if job.response_id in self._running:
            return  # already ours (a reclaim raced a take)
        run = (self._execute_ingestion(job) if kind_of(job.spec) == INGESTION
               else self._execute(job))
        task = asyncio.create_task(run, name=f"job-{job.response_id}")
        self._running[job.response_id] = _Running(job, task)
        task.add_done_callback(lambda _: self._finished(job.response_id))

    def _finished(self, response_id: str) -> None:
        self._running.pop(response_id, None)
        self._poked.set()  # a slot is free

    # -- one job ---------------------------------------------------------------------------------
    async def _execute(self, job: Job) -> None:
        # Acknowledged (removed from the queue) only once the job's end is stored: a job whose
        # final write failed stays pending, and the next reclaim (ours or another worker's)
        # finds its stored state and settles it. Terminal state and ack cannot be one script:
        # they live in different Redis Cluster slots (store/keys.py); ordering them this way
        # (state first, ack retried by the reclaim) gives the same guarantee.
        settled = False
        meter = Meter()
        spec: JobSpec | None = None
        try:
            if self._stopping:  # taken just as we stop: hand it back untouched
                await self._queue.requeue(job)
                self._release(job.response_id)
                self._metrics.job_finished("requeued")
                return
            spec = JobSpec.from_json(job.spec)  # unreadable: left for a worker that reads it
            if spec.request_id:
                # This task's own context: the job's upstream call and log lines carry the id
                # of the request that created it.
                # Tracing off, the call carries the client's trace context too (checked again:
                # the spec came through the store).
                CURRENT.set(RequestContext(spec.request_id, upstream_tag=secrets.token_hex(4),
                                           traceparent=accept_traceparent(spec.traceparent)))
            meter = await self._adopt(spec)
            # The compare-and-set first: it answers with the object, so a job that starts
            # costs one round trip here, not two.
            moved = await self._store.transition(
                job.response_id, tenant=spec.tenant, allowed_from=frozenset({t.S_QUEUED}),
                to=t.S_IN_PROGRESS,
                ttl=self._ttl)
            if moved.changed and moved.response is not None:
                settled = await self._run(job, ResponseRecord(moved.response, spec.tenant,
                                                              logged=True), spec)
                return
            record = await self._store.get_response_any(job.response_id)
            if record is None:
                settled = True
                return  # deleted or expired while queued
            if moved.changed:
                settled = await self._run(job, record, spec)
                return
            await self._close_abandoned(record)
            settled = True
        except asyncio.CancelledError:
            running = self._running.get(job.response_id)
            settled = True
            if running is None or running.generation is None:
                # Stopped before its generation began (one closes its own log when stopped).
                reason = SHUTDOWN if self._stopping else LOST
                settled = await self._tasks.shielded(self._settle(job.response_id, reason),
                                                     name="job-settle")
            raise
        except ProxyError as exc:
            log.error("worker %s: job %s: %s", self.name, job.response_id, failure_cause(exc))
        finally:
            running = self._running.get(job.response_id)
            if running is not None:
                running.finished = True
                self._count_generation(running)
            if not settled:
                log.error("worker %s: the end of %s is not stored; left for a reclaim",
                          self.name, job.response_id)
            elif running is None or not running.released:
                with contextlib.suppress(ProxyError):
                    await self._tasks.shielded(self._queue.done(job.entry_id), name="job-ack")
            await self._settle_meter(meter, running, spec)

    async def _execute_ingestion(self, job: Job) -> None:
        """A file's ingestion: acknowledged once it stored its end; a store failure leaves it
        pending for a reclaim (ingestion is idempotent), so does a worker without an ingester
        (a test's: the runtime always gives one)."""
        if self._stopping:  # taken just as we stop: hand it back untouched
            await self._queue.requeue(job)
            self._release(job.response_id)
            return
        if self._ingest is None:
            self._release(job.response_id)
            return
        try:
            await self._ingest(job.spec)
        except ProxyError as exc:
            log.error("worker %s: ingestion %s: %s", self.name, job.response_id, failure_cause(exc))
            return
        running = self._running.get(job.response_id)
        if running is not None:
            running.finished = True
        with contextlib.suppress(ProxyError):
            await self._tasks.shielded(self._queue.done(job.entry_id), name="job-ack")

    async def _adopt(self, spec: JobSpec) -> Meter:
        """The job's ticket, taken over from the request that created it."""
        if not spec.limit or self._limits is None:
            return Meter()
        return Meter(await self._limits.adopt(spec.tenant, spec.limit))

    async def _settle_meter(self, meter: Meter, running: _Running | None,
                            spec: JobSpec | None) -> None:
        """Free the job's stream slot and count what its generation spent, finished or cancelled
        mid-way (services/metering/meter.py), unless the job left us (handed back or reclaimed):
        then whoever runs or settles it next ends the ticket."""
        if running is not None and running.released:
            await meter.hand_over()  # not ours to end: just stop renewing it
            return
        generation = running.generation if running is not None else None
        if generation is not None:
            meter.track(turn_spent(generation.assembler, spec.chat if spec is not None else {}))
        with contextlib.suppress(asyncio.CancelledError):
            await self._tasks.shielded(meter.settle(), name="job-limit-end")

    def _count_generation(self, running: _Running) -> None:
        """A job that ran a generation ends with its status (the generation has closed itself by
        now, cancelled or stopped included). A job released to another worker is theirs to
        count; one that never began a generation is counted where it was settled."""
        generation = running.generation
        if generation is not None and not running.released and generation.assembler.done:
            self._count(generation.assembler.status)

    def _count(self, status: str) -> None:
        if status in _OUTCOMES:
            self._metrics.job_finished(_OUTCOMES[status])

    def _ended_without_turn(self, status: str) -> None:
        """This worker wrote the Response's end itself (no generation ran to count it)."""
        self._count(status)
        self._metrics.response_finished(status)

    def _release(self, response_id: str) -> None:
        running = self._running.get(response_id)
        if running is not None:
            running.released = True

    async def _run(self, job: Job, record: ResponseRecord, spec: JobSpec) -> bool:
        """Run the job's generation (services/generation/builder.py) to its end, made known first
        so a
        cancel or a shutdown reaches it; True once its end is stored. Traced: in a span, child
        of the creating request's (proxy/telemetry/tracing.py)."""
        tracing = self._generations.tracing
        if tracing is None:
            return await self._run_turn(job, record, spec)
        with tracing.job_span(spec.model, spec.traceparent, record.id):
            return await self._run_turn(job, record, spec)

    async def _run_turn(self, job: Job, record: ResponseRecord, spec: JobSpec) -> bool:
        generation = await self._generations.job(record, spec)
        if generation is None:  # no upstream: ended failed, its end stored
            self._ended_without_turn(t.S_FAILED)
            return True
        running = self._running.get(record.id)
        if running is not None:
            running.generation = generation
        async with contextlib.aclosing(generation.run()) as batches:
            async for _ in batches:
                pass
        return generation.recorder is not None and generation.recorder.final is not None

    async def _settle(self, response_id: str, reason: str) -> bool:
        """Close a stopped job's response; False if the store could not be told."""
        try:
            record = await self._store.get_response_any(response_id)
            if record is not None:
                await self._close_abandoned(record, reason)
        except ProxyError as exc:
            log.error("worker %s: could not close %s: %s", self.name, response_id,
                      failure_cause(exc))
            return False
        return True

    async def _close_abandoned(self, record: ResponseRecord, reason: str = LOST) -> None:
        """A job found in a state no live worker will finish: in_progress (its worker died)
        or cancelled with an open log. Complete the log from where it stopped."""
        if record.status == t.S_IN_PROGRESS:
            ending = "fail"
        elif record.status == t.S_CANCELLED and not record.closed:
            ending = "cancel"
        else:
            if record.status == t.S_CANCELLED:  # cancelled while queued, its log closed
                self._count(t.S_CANCELLED)
            return
        self._ended_without_turn(t.S_FAILED if ending == "fail" else t.S_CANCELLED)
        g = self._generations
        await g.event_log.end(record,
                        (lambda a: a.fail(reason)) if ending == "fail" else Assembler.cancel,
                        ids=g.ids, clock=g.clock)
        log.warning("worker %s: closed %s left %s by another worker", self.name, record.id,
                    record.status)

    # -- heartbeats, reclaims and cancels --------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        interval = self._jobs.heartbeat_interval
        min_idle_ms = int(interval * 2500)
        beat_at = 0.0
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), interval / 2)
            if self._stop.is_set():
                return
            try:
                now = time.monotonic()
                if now - beat_at >= interval:
                    beat_at = now
                    await self._beat()
                free = self._jobs.concurrency - len(self._running)
                if free > 0 and not self._stopping:
                    for job in await self._queue.reclaim(self.name, min_idle_ms, free):
                        self._launch(job)
            except StoreUnavailable as exc:
                log.warning("worker %s: heartbeat failed: %s", self.name, failure_cause(exc))

    async def _beat(self) -> None:
        running = list(self._running.values())
        if not running:
            return
        lost = set(await self._queue.keep_alive(self.name, [r.job.entry_id for r in running]))
        for entry in running:
            if entry.job.entry_id in lost and not entry.finished and not entry.task.done():
                # Another worker took it over (we were presumed dead): it now finishes the job.
                log.warning("worker %s: lost %s to another worker", self.name,
                            entry.job.response_id)
                entry.released = True
                entry.task.cancel()
        # Backup for a missed pub/sub message: a job no longer in_progress stops here.
        statuses = await self._queue.statuses([r.job.response_id for r in running])
        for entry in running:
            if statuses.get(entry.job.response_id) not in (t.S_IN_PROGRESS, t.S_QUEUED, None):
                entry.task.cancel()

    async def _cancel_loop(self) -> None:
        while not self._stopping:
            try:
                async for response_id in self._queue.cancels():
                    if self._stop.is_set():
                        return
                    running = self._running.get(response_id)
                    if running is not None:
                        running.task.cancel()
            except StoreUnavailable as exc:
                log.warning("worker %s: cancel channel lost: %s", self.name, failure_cause(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), 1.0)
