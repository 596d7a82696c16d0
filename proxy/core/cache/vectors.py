"""Vectors for the semantic cache: random-hyperplane buckets and the exact cosine. Pure numpy.

Candidates are found without a scan: `Hyperplanes(dim).bucket(v)` is the sign pattern of `v`
against `bits` fixed random hyperplanes (SimHash). Two vectors at angle θ fall on the same side of
one hyperplane with probability 1 - θ/π, so near neighbours share a bucket, or differ in one bit:
a lookup reads its own bucket and the `bits` buckets one bit away (`probes`). At the default
threshold (cosine 0.95, θ ≈ 18°) and 6 bits, a true neighbour is among the probed buckets about
9 times in 10, and the lookup reads about 7/64 of the namespace; a lost neighbour is a miss,
never a wrong answer. The final choice is the exact cosine (`best`).

The hyperplanes come from a fixed seed, so every instance (and every restart) buckets alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float32]
else:
    from proxy.core.vectors import lazynumpy as np

BITS = 6
SEED = 0x5EED


@dataclass(frozen=True)
class Hyperplanes:
    dim: int
    bits: int = BITS
    _planes: Vector = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(SEED)
        planes = rng.standard_normal((self.bits, self.dim)).astype(np.float32)
        object.__setattr__(self, "_planes", planes)

    def bucket(self, vector: Vector) -> int:
        signs = (self._planes @ vector) > 0
        return int(sum(1 << i for i, positive in enumerate(signs) if positive))

    def probes(self, vector: Vector) -> list[int]:
        """The vector's bucket first, then every bucket one bit away."""
        own = self.bucket(vector)
        return [own, *(own ^ (1 << i) for i in range(self.bits))]


def unit(values: list[float] | Vector) -> Vector | None:
    """The vector scaled to length 1 as float32; None for an empty or zero vector."""
    vector = np.asarray(values, dtype=np.float32)
    if vector.ndim != 1 or vector.size == 0:
        return None
    norm = float(np.linalg.norm(vector))
    if not np.isfinite(norm) or norm == 0.0:
        return None
    return vector / np.float32(norm)


def to_bytes(vector: Vector) -> bytes:
    return vector.astype("<f4").tobytes()


def from_bytes(data: bytes) -> Vector:
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


def cosines(query: Vector, candidates: list[Vector]) -> list[float]:
    """Cosine of the unit `query` with each unit candidate (of the same length; others 0)."""
    if not candidates:
        return []
    same = [c if c.shape == query.shape else np.zeros_like(query) for c in candidates]
    return [float(x) for x in np.stack(same) @ query]


def best(query: Vector, candidates: list[Vector], threshold: float,
         accept: list[bool] | None = None) -> tuple[int, float] | None:
    """(index, cosine) of the closest candidate at or above `threshold` among those
    `accept`ed, or None."""
    scores = cosines(query, candidates)
    found: tuple[int, float] | None = None
    for index, score in enumerate(scores):
        if accept is not None and not accept[index]:
            continue
        if score >= threshold and (found is None or score > found[1]):
            found = (index, score)
    return found
