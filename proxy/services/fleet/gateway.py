"""`Gateway`: the one way a service opens an upstream call.

    open(model, tenant, body)  ── Admission.admit ──▶ Fleet.open ──▶ Admission.watch ──▶ Call
    unqueued(model, path, body) ──────────────────▶ Fleet.open ──────────────────────▶ Call

Every generation (a create's turn, a background job's, each turn of a tool loop, a
pass-through chat completion, a compaction's summary) goes through `open`: it waits its turn in
the process's one `Admission` (services/fleet/admission.py), opens a stream on the chosen replica,
and hands its slot on when the call closes. A create's set-up slot (setups.py) is given back
once it is admitted, or before it queues. Nothing may be awaited between the admission and the
open (admission.py's accounting rule), which is why they live in one method.

`unqueued` is for the fleet's bookkeeping calls (`/tokenize` for `input_tokens`, truncation and
the compaction threshold): short, not generations, and counted in-flight by the fleet like any
call, but never queued behind generations: a token count waiting 30 s behind a saturated
model would hold up the very request that is about to queue anyway.

The upstream request carries the creating request's id (`x-request-id`, upstream/client.py reads
it from the request context), a background job's included (its worker sets that context).
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.context.requestctx import end_setup
from proxy.services.fleet.admission import Admission
from proxy.services.fleet.fleet import CHAT_PATH, Call, Fleet
from proxy.services.fleet.setups import SetupGate


@dataclass(frozen=True)
class Gateway:
    fleet: Fleet
    admission: Admission
    # Creates' set-ups in arrival order, a few at a time (setups.py; None: no gate).
    setups: SetupGate | None = None

    async def open(self, model: str, tenant: str, body: bytes, *, stream: bool,
                   affinity: str | None = None, home: str | None = None,
                   priority: bool = False, bounded: bool = True,
                   path: str = CHAT_PATH) -> Call:
        """An admitted call to `path` on a replica serving `model`. `bounded=False`: may queue
        past the admission's length bound (background jobs and tool loops, whose number is
        bounded elsewhere). Raises what `admit` and `Fleet.open` raise (429, 404, 502...)."""
        # A request waiting for a replica slot gives its set-up slot up first (setups.py).
        await self.admission.admit(model, tenant, priority=priority, bounded=bounded,
                                   on_queue=end_setup)
        # Admitted: the rest waits on the replica (connect, headers), not on this core, and
        # must not hold the next set-up back (nor may anything be awaited before `open`).
        end_setup()
        call = await self.fleet.open(model, path, body, stream=stream, affinity=affinity,
                                     home=home)
        return self.admission.watch(call)

    async def unqueued(self, model: str, path: str, body: bytes, *,
                       affinity: str | None = None) -> Call:
        """A non-streamed bookkeeping call (`/tokenize`), not admitted: see the docstring."""
        return await self.fleet.open(model, path, body, stream=False, affinity=affinity)

    def grants(self, tenant: str) -> bool:
        """The key may ask for `service_tier: "priority"`."""
        return self.admission.grants(tenant)
