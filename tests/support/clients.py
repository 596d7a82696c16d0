"""`openai` SDK clients for e2e tests, one per (server, key), closed when the module ends.

An SDK client holds an httpx pool; one left to the garbage collector leaves its sockets open
until then, and under `filterwarnings = error` the ResourceWarning fails whichever test happens
to be running at that moment."""

from __future__ import annotations

from typing import Any

import openai

from tests.support.conformance import check_stream


class SdkClients:
    def __init__(self) -> None:
        self._made: dict[tuple[str, str], openai.OpenAI] = {}

    def get(self, url: str, key: str) -> openai.OpenAI:
        client = self._made.get((url, key))
        if client is None:
            client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
            self._made[(url, key)] = client
        return client

    def close(self) -> None:
        for client in self._made.values():
            client.close()
        self._made.clear()


# The registry e2e modules share; tests/e2e/conftest.py closes it when each module ends.
SDK = SdkClients()


def streamed(client: openai.OpenAI, **body: Any) -> list[dict[str, Any]]:
    """Every event of a streamed create, as received, after the full conformance check."""
    events = [event.to_dict() for event in client.responses.create(stream=True, **body)]
    check_stream(events)
    return events
