from __future__ import annotations

from typing import Any

import pytest

from proxy.core.errors import ModelNotFound
from proxy.services.fleet import AFFINITY_SLACK, Fleet


class StaticProbe:
    """An upstream whose every replica serves model `m` (so an on-demand re-discovery does not
    change the state a test set up)."""

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        return None

    async def get_json(self, *args: Any, **kwargs: Any) -> Any:
        return {"data": [{"id": "m"}]}


def fleet(*urls: str) -> Fleet:
    f = Fleet(StaticProbe(), urls)  # type: ignore[arg-type]
    for r in f.replicas:
        r.healthy, r.known, r.model_ids = True, True, frozenset({"m"})
    return f


async def test_least_in_flight_wins_without_affinity() -> None:
    f = fleet("http://a", "http://b", "http://c")
    f.replicas[0].in_flight, f.replicas[1].in_flight, f.replicas[2].in_flight = 3, 1, 2
    assert (await f.choose("m")).url == "http://b"


async def test_affinity_is_stable_and_bounded_by_load() -> None:
    f = fleet("http://a", "http://b", "http://c")
    first = await f.choose("m", affinity="conv_1")
    for _ in range(5):
        assert (await f.choose("m", affinity="conv_1")) is first
    first.in_flight = AFFINITY_SLACK + 1
    assert (await f.choose("m", affinity="conv_1")) is not first


async def test_unknown_model_is_model_not_found_when_replicas_are_up() -> None:
    f = fleet("http://a")
    with pytest.raises(ModelNotFound) as info:
        await f.choose("other")
    assert info.value.status == 404 and info.value.param == "model"


async def test_unhealthy_replicas_are_skipped() -> None:
    f = fleet("http://a", "http://b")
    f.replicas[0].healthy = False
    assert (await f.choose("m")).url == "http://b"


async def test_nothing_healthy_still_tries_a_replica() -> None:
    f = fleet("http://a", "http://b")
    for r in f.replicas:
        r.healthy = False
    f.replicas[0].in_flight = 1
    assert (await f.choose("m")).url == "http://b"


async def test_model_list_merges_replicas_first_wins() -> None:
    f = fleet("http://a", "http://b")
    f.replicas[0].models = ({"id": "m", "root": "a"},)
    f.replicas[1].models = ({"id": "m", "root": "b"}, {"id": "n"})
    assert f.model_list() == [{"id": "m", "root": "a"}, {"id": "n"}]


class FlakyProbe(StaticProbe):
    def __init__(self) -> None:
        self.fail = False

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail:
            raise TimeoutError
        return None


async def test_one_slow_probe_does_not_take_a_known_replica_down() -> None:
    probe = FlakyProbe()
    f = Fleet(probe, ["http://a"])  # type: ignore[arg-type]
    await f.refresh()
    assert f.replicas[0].healthy
    probe.fail = True
    await f.refresh()
    assert f.replicas[0].healthy  # one miss: a busy replica, not a dead one
    await f.refresh()
    assert not f.replicas[0].healthy and f.replicas[0].error == "TimeoutError"
    probe.fail = False
    await f.refresh()
    assert f.replicas[0].healthy


def test_max_model_len_is_the_smallest_a_serving_replica_reports() -> None:
    f = fleet("http://a", "http://b")
    f.replicas[0].models = ({"id": "m", "max_model_len": 8192},)
    f.replicas[1].models = ({"id": "m", "max_model_len": 4096}, {"id": "x", "max_model_len": 9})
    assert f.max_model_len("m") == 4096
    assert f.max_model_len("unknown") is None
    f.replicas[1].models = ({"id": "m"},)  # a server that does not say
    assert f.max_model_len("m") == 8192


async def test_round_robin_routing_takes_replicas_in_turn_and_ignores_affinity() -> None:
    f = fleet("http://a", "http://b", "http://c")
    f.routing = "round_robin"
    f.replicas[0].in_flight = 5
    picks = [(await f.choose("m", affinity="conv_1")).url for _ in range(6)]
    assert sorted(picks[:3]) == ["http://a", "http://b", "http://c"]
    assert picks[3:] == picks[:3]


async def test_least_loaded_routing_ignores_affinity_and_rotates_ties() -> None:
    f = fleet("http://a", "http://b", "http://c")
    f.routing = "least_loaded"
    f.replicas[1].in_flight = 2
    picks = {(await f.choose("m", affinity="conv_1")).url for _ in range(4)}
    assert picks == {"http://a", "http://c"}  # never the busier one; ties not by list order
