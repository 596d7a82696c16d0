"""The replica choice (core/fleet/balancer.py): pure, so every rule is checked on plain
snapshots."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.fleet.balancer import Candidate, choose, rendezvous_order, within_bound

URLS = ("http://a", "http://b", "http://c")


def fleet(*loads: float, weights: tuple[float, ...] | None = None) -> list[Candidate]:
    weights = weights or (1.0,) * len(loads)
    return [Candidate(u, load, w) for u, load, w in zip(URLS, loads, weights, strict=False)]


def test_unkeyed_goes_to_the_least_loaded() -> None:
    assert choose(fleet(3, 1, 2)).url == "http://b"


def test_ties_are_not_broken_by_list_order() -> None:
    # An idle fleet, sequential traffic: the picks counter and the turn spread it evenly.
    picks = dict.fromkeys(URLS, 0)
    for turn in range(30):
        c = choose([Candidate(u, 0.0, 1.0, picks[u]) for u in URLS], turn=turn)
        picks[c.url] += 1
    assert picks == dict.fromkeys(URLS, 10)


def test_ties_rotate_with_the_turn_alone() -> None:
    chosen = {choose(fleet(0, 0, 0), turn=t).url for t in range(3)}
    assert chosen == set(URLS)


def test_weight_sets_the_share_of_tied_traffic() -> None:
    picks = {"http://a": 0, "http://b": 0}
    for turn in range(30):
        c = choose([Candidate("http://a", 0, 2.0, picks["http://a"]),
                    Candidate("http://b", 0, 1.0, picks["http://b"])], turn=turn)
        picks[c.url] += 1
    assert picks == {"http://a": 20, "http://b": 10}


def test_weight_scales_the_load_compared() -> None:
    # 3 requests on a weight-4 replica are lighter than 1 on a weight-1 replica.
    assert choose(fleet(3, 1, weights=(4.0, 1.0))).url == "http://a"


def test_a_key_sticks_to_its_rendezvous_replica() -> None:
    target = rendezvous_order(fleet(0, 0, 0), "conv_1")[0]
    for loads in ((0, 0, 0), (1, 0, 0), (0, 2, 1)):
        state = fleet(*loads)
        target_load = next(c.load for c in state if c.url == target.url)
        if within_bound(next(c for c in state if c.url == target.url), state, 1.25, 0):
            assert choose(state, key="conv_1", headroom=0).url == target.url, (loads, target_load)


def test_an_overloaded_target_sheds_to_its_stable_fallback() -> None:
    order = [c.url for c in rendezvous_order(fleet(0, 0, 0), "conv_1")]
    loads = {order[0]: 6.0, order[1]: 1.0, order[2]: 1.0}
    state = [Candidate(u, loads[u]) for u in URLS]
    # 6 + 1 > ceil(1.25 * 9 / 3) = 4: over the bound; the next in the key's order takes it,
    # every time (not the least loaded of a tie, not a random one).
    for turn in range(5):
        assert choose(state, key="conv_1", turn=turn, headroom=0).url == order[1]
    # Back under the bound, the key returns home.
    loads[order[0]] = 2.0
    state = [Candidate(u, loads[u]) for u in URLS]
    assert choose(state, key="conv_1", headroom=0).url == order[0]


def test_the_recorded_home_comes_before_the_key_order() -> None:
    order = [c.url for c in rendezvous_order(fleet(0, 0, 0), "resp_root")]
    assert choose(fleet(0, 0, 0), key="resp_root", home=order[2]).url == order[2]
    # An overloaded home sheds to the key's own order, skipping itself.
    loads = {order[2]: 9.0, order[0]: 0.0, order[1]: 0.0}
    state = [Candidate(u, loads[u]) for u in URLS]
    assert choose(state, key="resp_root", home=order[2], headroom=0).url == order[0]


def test_a_home_that_left_the_fleet_falls_back_to_the_key() -> None:
    order = [c.url for c in rendezvous_order(fleet(0, 0, 0), "resp_root")]
    assert choose(fleet(0, 0, 0), key="resp_root", home="http://gone").url == order[0]


def test_the_factor_is_the_allowed_overload() -> None:
    state = fleet(3, 1, 1)  # mean after placement (5 + 1) / 3 = 2
    assert not within_bound(state[0], state, 1.25, 0)  # 4 > ceil(2.5) = 3
    assert within_bound(state[0], state, 2.0, 0)  # 4 <= ceil(4.0)


def test_headroom_keeps_a_quiet_fleet_on_its_keys() -> None:
    # One request more than idle peers is no overload (and may be a stale scrape).
    state = fleet(1, 0, 0)
    assert not within_bound(state[0], state, 1.25, 0)
    assert within_bound(state[0], state, 1.25)
    state = fleet(6, 1, 1)  # a real overload still sheds: 7 > ceil(3.75) + 2
    assert not within_bound(state[0], state, 1.25)


def test_rendezvous_moves_only_the_keys_of_a_leaving_replica() -> None:
    keys = [f"k{i}" for i in range(300)]
    before = {k: rendezvous_order(fleet(0, 0, 0), k)[0].url for k in keys}
    after = {k: rendezvous_order(fleet(0, 0), k)[0].url for k in keys}  # c left
    moved = [k for k in keys if before[k] != after[k]]
    assert all(before[k] == "http://c" for k in moved)
    assert Counter(before.values())["http://c"] == len(moved)


@given(st.lists(st.integers(0, 50), min_size=1, max_size=6), st.text(max_size=8),
       st.floats(1.0, 3.0))
def test_a_keyed_choice_stays_within_the_bound_whenever_one_replica_can(
        loads: list[int], key: str, factor: float) -> None:
    state = [Candidate(f"http://r{i}", float(x)) for i, x in enumerate(loads)]
    for headroom in (0, 2):
        chosen = choose(state, key=key, factor=factor, headroom=headroom)
        assert chosen in state
        if any(within_bound(c, state, factor, headroom) for c in state):
            assert within_bound(chosen, state, factor, headroom)
