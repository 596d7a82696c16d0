"""Each key's share of the background job queue, and the 429 that refuses a job past it.

One key's queued + running jobs of every kind (background responses, vector store ingestion)
stay within `--max-queued-jobs`, the whole queue's within `--max-queued-jobs-total`; the queue
checks both atomically when it adds (store/jobqueue.py). A refusal is a 429 with Retry-After,
naming which bound was reached: a key at its share is told about its own jobs, never about the
other keys'.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.errors import RateLimited
from proxy.settings import JobSettings
from proxy.store.base import Enqueued

# Seconds a refused client is told to wait: about one job's length, after which a place of its
# own (or of the queue) has usually been freed.
RETRY_AFTER = 5


@dataclass(frozen=True)
class QueueShare:
    per_key: int  # --max-queued-jobs
    total: int  # --max-queued-jobs-total

    @classmethod
    def of(cls, jobs: JobSettings) -> QueueShare:
        return cls(per_key=jobs.max_queued, total=max(jobs.max_queued_total, jobs.max_queued))


def refused(answer: Enqueued, share: QueueShare, what: str = "background job") -> RateLimited:
    """The 429 for an enqueue the queue refused (`answer` is not "queued")."""
    if answer == "key_full":
        return RateLimited(f"This API key already has {share.per_key} background jobs queued or "
                           f"running (--max-queued-jobs); the {what} was not queued. Retry once "
                           "some have finished.", retry_after=RETRY_AFTER)
    return RateLimited(f"The background queue is full ({share.total} jobs); the {what} was not "
                       "queued. Retry later.", retry_after=RETRY_AFTER)
