"""Request tolerance: how strict a create is with what real clients send (CONTRACT.md,
"Request tolerance"). Pure.

Clients such as Codex send fields we have no use for and hosted tools we cannot run, and offer
no way to stop. Lenient (the default) lets such a request through and says what was left out in
response headers, so nothing is dropped silently; strict keeps the 400s. Features we refuse
for a reason (e.g. `prompt` templates) stay refused either way: ignoring them would change the
answer, not just drop a hint.
"""

from __future__ import annotations

from dataclasses import dataclass

IGNORED_HEADER = "x-proxy-ignored-params"
DROPPED_HEADER = "x-proxy-dropped-tools"


@dataclass(frozen=True, slots=True)
class Tolerance:
    strict_params: bool = False  # an unknown top-level field is a 400, not ignored
    reject_hosted: bool = False  # a hosted tool is a 400, not left out

    @classmethod
    def of(cls, params: str, hosted_tools: str) -> Tolerance:
        return cls(strict_params=params == "strict", reject_hosted=hosted_tools == "reject")


def tolerance_headers(ignored: tuple[str, ...], dropped: tuple[str, ...]) -> dict[str, str]:
    """The response headers that name what a lenient create left out (none when nothing was)."""
    headers: dict[str, str] = {}
    if ignored:
        headers[IGNORED_HEADER] = ",".join(ignored)
    if dropped:
        headers[DROPPED_HEADER] = ",".join(dict.fromkeys(dropped))
    return headers
