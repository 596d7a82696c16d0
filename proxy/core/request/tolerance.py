"""Request tolerance: how strict a create is with what real clients send (docs/contract.md,
"Request tolerance"). Pure.

Clients such as Codex send fields we have no use for and hosted tools we cannot run, and offer
no way to stop. Lenient (the default) lets such a request through and says what was left out in
response headers, so nothing is dropped silently; strict keeps the 400s. Features we refuse
for a reason (e.g. `prompt` templates) stay refused either way: ignoring them would change the
answer, not just drop a hint.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

IGNORED_HEADER = "x-proxy-ignored-params"
DROPPED_HEADER = "x-proxy-dropped-tools"
# A body may carry any number of keys of any text: the header names a bounded number, each
# percent-encoded (a key with a comma, a CR/LF or non-Latin-1 text stays one safe token).
MAX_NAMED = 32


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
        named = [quote(key[:64], safe="") for key in ignored[:MAX_NAMED]]
        if len(ignored) > MAX_NAMED:
            named.append(f"+{len(ignored) - MAX_NAMED}-more")
        headers[IGNORED_HEADER] = ",".join(named)
    if dropped:
        headers[DROPPED_HEADER] = ",".join(dict.fromkeys(dropped))
    return headers
