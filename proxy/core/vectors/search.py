"""Search over one vector store's chunks: exact cosine with numpy. Pure (no I/O).

A `Corpus` is a store's chunks as one float32 matrix of unit rows (n x d), their texts, and
for each row the file it came from. A search is one matrix-vector product (n·d multiply-adds:
~25 ms for 10^5 chunks of 256 dimensions on one core, docs/BENCHMARKS.md), the files' attribute
filter applied as a row mask, then the best `k` by `argpartition` (no full sort). Scores are
cosines clipped to [0, 1] (OpenAI's scores are in that range), `score_threshold` applied to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
else:
    from proxy.core.vectors import lazynumpy as np

from proxy.core.vectors.filters import matches


@dataclass(frozen=True, slots=True)
class FileMeta:
    file_id: str
    filename: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Corpus:
    matrix: np.ndarray  # (n, d) float32, unit rows
    texts: list[str]
    owners: np.ndarray  # (n,) int32: index into `files`
    files: list[FileMeta] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.owners.nbytes) + sum(len(t) for t in self.texts)

    @classmethod
    def build(cls, parts: Sequence[tuple[FileMeta, np.ndarray, list[str]]]) -> Corpus:
        """From each file's (meta, its vectors, its texts); files whose vectors do not have
        the first file's dimension are left out (an embedding model changed midway)."""
        kept = [(m, v, t) for m, v, t in parts if v.ndim == 2 and len(v) == len(t)]
        dim = kept[0][1].shape[1] if kept else 0
        kept = [(m, v, t) for m, v, t in kept if v.shape[1] == dim]
        if not kept:
            return cls(np.zeros((0, 0), np.float32), [], np.zeros(0, np.int32), [])
        matrix = np.concatenate([v for _, v, _ in kept]).astype(np.float32, copy=False)
        owners = np.concatenate([np.full(len(v), i, np.int32)
                                 for i, (_, v, _) in enumerate(kept)])
        texts = [text for _, _, t in kept for text in t]
        return cls(matrix, texts, owners, [m for m, _, _ in kept])


@dataclass(frozen=True, slots=True)
class Hit:
    file: FileMeta
    score: float
    text: str


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: np.ndarray = (vectors / norms).astype(np.float32)
    return out


def search(corpus: Corpus, query: np.ndarray, *, limit: int, threshold: float = 0.0,
           filters: dict[str, Any] | None = None) -> list[Hit]:
    if not corpus.texts or query.shape != (corpus.matrix.shape[1],) or limit <= 0:
        return []
    norm = float(np.linalg.norm(query))
    q = (query / (norm or 1.0)).astype(np.float32)
    scores = corpus.matrix @ q
    if filters is not None:
        allowed = np.array([matches(filters, f.attributes) for f in corpus.files], bool)
        scores = np.where(allowed[corpus.owners], scores, -np.inf)
    k = min(limit, len(scores))
    best = np.argpartition(-scores, k - 1)[:k]
    best = best[np.argsort(-scores[best], kind="stable")]
    hits: list[Hit] = []
    for row in best:
        score = float(scores[row])
        if score == -np.inf:
            break
        score = min(1.0, max(0.0, score))
        if score < threshold:
            break
        hits.append(Hit(corpus.files[int(corpus.owners[row])], score, corpus.texts[row]))
    return hits


def merged(results: Sequence[list[Hit]], limit: int) -> list[Hit]:
    """Several stores' hits as one ranking (file_search over more than one store)."""
    every = [hit for hits in results for hit in hits]
    every.sort(key=lambda hit: -hit.score)
    return every[:limit]


def result(hit: Hit) -> dict[str, Any]:
    """A hit as `vector_stores.search` answers it (VectorStoreSearchResponse)."""
    return {"file_id": hit.file.file_id, "filename": hit.file.filename, "score": hit.score,
            "attributes": hit.file.attributes, "content": [{"type": "text", "text": hit.text}]}
