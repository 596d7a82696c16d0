from __future__ import annotations

from typing import Any

import pytest

from proxy.core.errors import ModelNotFound, UpstreamError
from proxy.core.fleet import balancer, replicaload
from proxy.services.fleet.fleet import Fleet
from proxy.settings.fleetfile import ReplicaSpec


class Page:
    def __init__(self, content: bytes) -> None:
        self.content = content


class StaticProbe:
    """An upstream whose every replica serves model `m` (so an on-demand re-discovery does not
    change the state a test set up) and whose /metrics is `metrics[url]` (else empty)."""

    def __init__(self) -> None:
        self.metrics: dict[str, bytes] = {}
        self.keys: dict[str, str] = {}

    async def get(self, base: str, path: str, **kwargs: Any) -> Any:
        return Page(self.metrics.get(base, b"") if path == "/metrics" else b"")

    def use_key(self, base: str, api_key: str) -> None:
        self.keys[base] = api_key

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
    first.in_flight = 9  # far above the mean of (9 + 1) / 3: it sheds, to one fallback
    fallback = await f.choose("m", affinity="conv_1")
    assert fallback is not first
    for _ in range(5):
        assert (await f.choose("m", affinity="conv_1")) is fallback


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
        super().__init__()
        self.fail = False

    async def get(self, base: str, path: str, **kwargs: Any) -> Any:
        if self.fail:
            raise TimeoutError
        return await super().get(base, path)


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


async def test_sequential_requests_rotate_over_an_idle_fleet() -> None:
    f = fleet("http://a", "http://b", "http://c")
    counts = dict.fromkeys(("http://a", "http://b", "http://c"), 0)
    for _ in range(30):
        replica = await f.choose("m")
        replica.picks += 1  # what `open` does once the replica took the request
        counts[replica.url] += 1
    assert counts == dict.fromkeys(counts, 10)


VLLM_METRICS = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 5.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
"""


async def test_discovery_scrapes_the_load_other_instances_put_on_a_replica() -> None:
    probe = StaticProbe()
    probe.metrics["http://a"] = VLLM_METRICS
    f = Fleet(probe, ["http://a", "http://b"])  # type: ignore[arg-type]
    f.replicas[0].in_flight = 1  # ours, part of the 5 running
    await f.refresh()
    a, b = f.replicas
    assert a.signal == replicaload.Signal(5.0, 2.0, 0.5, own_at_scrape=1)
    assert b.signal is None  # no /metrics: no signal, only our own count
    assert a.load == (1 + 6) * 1.5
    a.in_flight = 0  # ours ended: the others' 6 remain until the next scrape
    assert a.load == 6 * 1.5
    assert (await f.choose("m")) is b
    assert f.status()[0]["metrics"] == {"running": 5.0, "waiting": 2.0, "kv_cache_usage": 0.5}


async def test_a_fleet_file_replica_serves_only_its_models_and_uses_its_key() -> None:
    probe = StaticProbe()
    specs = [ReplicaSpec("http://a", weight=2.0, api_key="sk-a", max_concurrency=8,
                         models=("m",)),
             ReplicaSpec("http://b", models=("n",))]
    f = Fleet(probe, (), specs=specs)  # type: ignore[arg-type]
    a, b = f.replicas
    assert probe.keys == {"http://a": "sk-a"}
    assert (a.weight, a.max_concurrency, b.max_concurrency) == (2.0, 8, None)
    assert a.serves("m") and not b.serves("m")  # before any discovery
    await f.refresh()  # the probe's replicas all list `m` only
    assert a.serves("m") and not b.serves("m") and not b.serves("n")
    assert "sk-a" not in repr(f.status()) and "sk-a" not in repr(specs)


async def test_a_replica_back_up_does_not_take_every_tie_until_it_caught_up() -> None:
    probe = FlakyProbe()
    f = Fleet(probe, ["http://a", "http://b"])  # type: ignore[arg-type]
    await f.refresh()
    f.replicas[0].picks, f.replicas[1].healthy = 100, False
    await f.refresh()  # b is back
    assert f.replicas[1].picks == 100


class NoMetricsProbe(StaticProbe):
    async def get(self, base: str, path: str, **kwargs: Any) -> Any:
        if path == "/metrics":
            raise UpstreamError("upstream answered 404")
        return await super().get(base, path)


async def test_a_replica_without_metrics_is_up_with_no_signal() -> None:
    f = Fleet(NoMetricsProbe(), ["http://a"])  # type: ignore[arg-type]
    f.replicas[0].signal = replicaload.Signal(9, 9, 1.0, 0)  # an old scrape is not kept
    await f.refresh()
    assert f.replicas[0].healthy and f.replicas[0].signal is None
    f.replicas[0].in_flight = 2
    assert f.replicas[0].load == 2.0


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


async def test_the_only_candidate_is_chosen_without_the_balancer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One replica serving the model is the choice whatever the key, home or load: no
    candidate states built, no key hashed (~2-4 µs a request on a one-replica fleet)."""
    f = fleet("http://a", "http://b")
    f.replicas[1].model_ids = frozenset({"other"})
    f.replicas[0].in_flight = 50

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the balancer was asked to choose among one")

    monkeypatch.setattr(balancer, "choose", refuse)
    for affinity, home in ((None, None), ("key", None), ("key", "http://b")):
        assert (await f.choose("m", affinity=affinity, home=home)).url == "http://a"
