"""Sealed reasoning over HTTP: a blob one instance hands out opens on any instance with the same
fleet secret, and anything else is a 400 naming the field (never a 500, never inflated)."""

from __future__ import annotations

from typing import Any

from proxy.settings import Settings
from tests.integration.test_http_errors import assert_openai_error, proxy_for

ASK = {"model": "sim-model", "input": "think [[sim reasoning=6]]",
       "include": ["reasoning.encrypted_content"], "store": False}


def _follow_up(reasoning: dict[str, Any]) -> dict[str, Any]:
    return {"model": "sim-model", "store": False, "input": [
        {"role": "user", "content": "think"},
        {"type": "reasoning", "id": reasoning["id"], "summary": [],
         "encrypted_content": reasoning["encrypted_content"]},
        {"role": "user", "content": "and then?"},
    ]}


async def test_a_blob_sealed_on_one_instance_opens_on_another_with_the_same_secret(
        settings: Settings) -> None:
    shared = settings.replace(fleet_secret="one-fleet")
    async for first in proxy_for(shared):
        made = await first.post("/v1/responses", json=ASK)
        assert made.status_code == 200, made.text
        reasoning = next(i for i in made.json()["output"] if i["type"] == "reasoning")
        assert reasoning["encrypted_content"].startswith("rpx2.")
    async for second in proxy_for(shared):
        again = await second.post("/v1/responses", json=_follow_up(reasoning))
        assert again.status_code == 200, again.text
    async for other in proxy_for(settings.replace(fleet_secret="another-fleet")):
        refused = await other.post("/v1/responses", json=_follow_up(reasoning))
        assert_openai_error(refused, 400, param="input[1].encrypted_content",
                            code="invalid_encrypted_content")


async def test_a_forged_or_bombed_blob_is_a_400_naming_the_field(settings: Settings) -> None:
    import base64
    import zlib

    bomb = zlib.compress(b"\0" * (64 << 20), 9)  # 64 MiB of zeros in ~64 KB
    forged = [
        "rpx1." + base64.urlsafe_b64encode(bomb).decode(),  # the old unauthenticated form
        "rpx2." + base64.urlsafe_b64encode(b"\0" * 32 + bomb).decode(),
        "gAAAAB-not-ours",
    ]
    async for client in proxy_for(settings):
        for blob in forged:
            body = _follow_up({"id": "rs_1", "encrypted_content": blob})
            assert_openai_error(await client.post("/v1/responses", json=body), 400,
                                param="input[1].encrypted_content")
