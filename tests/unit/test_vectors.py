"""core/cache/vectors.py: buckets put near vectors together; the cosine picks the closest
allowed."""

from __future__ import annotations

import numpy as np

from proxy.core.cache.vectors import Hyperplanes, best, from_bytes, to_bytes, unit


def test_buckets_are_stable_and_near_vectors_share_a_probe() -> None:
    rng = np.random.default_rng(1)
    planes = Hyperplanes(64)
    ones = unit(np.ones(64))
    assert ones is not None
    assert Hyperplanes(64).bucket(ones) == planes.bucket(ones)  # every instance buckets alike
    found = 0
    for _ in range(200):
        a = unit(rng.standard_normal(64))
        assert a is not None
        b = unit(a + 0.1 * unit(rng.standard_normal(64)))  # cosine about 0.995
        assert b is not None
        found += planes.bucket(b) in planes.probes(a)
    assert found >= 190
    assert len(set(planes.probes(a))) == planes.bits + 1


def test_best_takes_the_closest_accepted_candidate_at_the_threshold() -> None:
    query = unit([1.0, 0.0, 0.0])
    assert query is not None
    near, nearer, far = (unit(v) for v in ([1.0, 0.2, 0.0], [1.0, 0.1, 0.0], [0.0, 1.0, 0.0]))
    assert near is not None and nearer is not None and far is not None
    assert best(query, [near, nearer, far], 0.95) == (1, float(nearer @ query))
    assert best(query, [near, nearer, far], 0.95, [True, False, True])[0] == 0  # type: ignore[index]
    assert best(query, [far], 0.95) is None
    assert best(query, [unit([1.0, 0.0])], 0.5) is None  # another length never matches


def test_vectors_travel_as_float32_bytes() -> None:
    vector = unit([3.0, 4.0])
    assert vector is not None
    assert np.allclose(from_bytes(to_bytes(vector)), [0.6, 0.8])
    assert unit([]) is None and unit([0.0, 0.0]) is None
