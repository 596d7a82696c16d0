"""Steps several cases share: stores built and waited for, jobs listed, errors checked."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx

from tests.costbounds.harness import Stack, auth

MODEL = "sim-model"


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def refusal(answer: httpx.Response, status: int = 400) -> dict[str, Any]:
    """The OpenAI-shaped error of a refused request (asserting its status)."""
    assert answer.status_code == status, (answer.status_code, answer.text[:500])
    error: dict[str, Any] = answer.json()["error"]
    assert {"message", "type", "param", "code"} <= set(error)
    return error


def same_minute(seconds_needed: float) -> None:
    """Wait for a fresh minute when this one ends within `seconds_needed` (at most that)."""
    left = 60 - time.time() % 60
    if left < seconds_needed:
        time.sleep(left + 0.2)


def vector_store(stack: Stack, key: str, file_ids: list[str]) -> str:
    made = stack.post("/v1/vector_stores", key, {"name": unique("cost-"), "file_ids": file_ids})
    assert made.status_code == 200, made.text
    store_id: str = made.json()["id"]
    return store_id


def file_in_store(stack: Stack, key: str, store_id: str, file_id: str,
                  within: float = 120.0) -> dict[str, Any]:
    """The store's file once it is no longer `in_progress`, or as it is after `within` s."""
    deadline = time.monotonic() + within
    while True:
        got: dict[str, Any] = httpx.get(
            f"{stack.url}/v1/vector_stores/{store_id}/files/{file_id}", headers=auth(key),
            timeout=30).json()
        if got.get("status") != "in_progress" or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def status_of(stack: Stack, key: str, response_id: str) -> str:
    got = httpx.get(f"{stack.url}/v1/responses/{response_id}", headers=auth(key), timeout=30)
    status: str = got.json().get("status", "unknown")
    return status


def wait_status(stack: Stack, key: str, response_id: str, statuses: set[str],
                within: float) -> str:
    deadline = time.monotonic() + within
    while (status := status_of(stack, key, response_id)) not in statuses:
        if time.monotonic() > deadline:
            return status
        time.sleep(0.1)
    return status


def background(stack: Stack, key: str, text: str) -> httpx.Response:
    return stack.post("/v1/responses", key, {"model": MODEL, "input": text, "background": True,
                                              "store": True})


SLOW_JOB = "slow job [[sim tokens=20 delay_ms=100]]"  # 2 s a job


def fill_queue_as(stack: Stack, key: str, tries: int,
                  prompt: str = SLOW_JOB) -> tuple[list[str], httpx.Response | None]:
    """Slow background creates of `key` until one is refused (at most `tries`): the ids
    accepted and the refusal."""
    accepted: list[str] = []
    for _ in range(tries):
        answer = background(stack, key, prompt)
        if answer.status_code != 200:
            return accepted, answer
        accepted.append(answer.json()["id"])
    return accepted, None
