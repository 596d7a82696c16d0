"""numpy, imported at its first use instead of at start.

Why it matters: numpy's import loads its bundled OpenBLAS, whose Fortran runtime loads
libquadmath, and libquadmath's load-time constructor registers printf hooks (`%Q`) with glibc.
From then on every `sprintf` in the process takes glibc's slow positional path (~1.1k
instructions a call instead of ~0.7k). hiredis formats each argument's length of every Redis
command with one: a stored create's packing (twenty-odd arguments then) cost 42k instructions
with numpy loaded and 33k without (docs/BENCHMARKS.md, "Round 4, seventh pass"). So a process
that never uses vectors (file_search, vector stores, the semantic cache) never loads it, and
one that does pays from its first such use. tests/integration/test_lazy_numpy.py holds the
start and plain requests to it.

The vector modules import it as

    if TYPE_CHECKING:
        import numpy as np
    else:
        from proxy.core.lazynumpy import np

so the type checker sees numpy itself and the code reads as it would with numpy imported.
"""

from __future__ import annotations

import importlib
from typing import Any


class _Numpy:
    """Stands for the numpy module: the first attribute read imports it (then Python's module
    cache answers, a dictionary lookup)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module("numpy"), name)


np = _Numpy()
