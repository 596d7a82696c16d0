"""numpy, imported at its first use instead of at start.

Why it matters: numpy's import loads its bundled OpenBLAS, whose Fortran runtime loads
libquadmath, and libquadmath's load-time constructor registers printf hooks (`%Q`) with glibc.
From then on every `sprintf` in the process takes glibc's slow positional path (~1.1k
instructions a call instead of ~0.7k). hiredis formats each argument's length of every Redis
command with one: a stored create's packing (twenty-odd arguments then) cost 42k instructions
with numpy loaded and 33k without (docs/BENCHMARKS.md, "Round 4, seventh pass"). So a process
that cannot make vectors (no `--embedding-model`: no file_search, vector store or semantic
cache) never loads it; one that can imports it at start (runtime.py: ~80 ms then, not on the
event loop at the first search) and pays the slower `sprintf` from there.
tests/integration/test_lazy_numpy.py holds both.

The vector modules import this module as numpy's stand-in:

    if TYPE_CHECKING:
        import numpy as np
    else:
        from proxy.core.vectors import lazynumpy as np

so the type checker sees numpy itself and the code reads as it would with numpy imported. The
first read of a name imports numpy (module `__getattr__`) and keeps that name here, so each
later read is a plain module attribute, as numpy's own. This module defines nothing else at
its top level, so no name of numpy's is shadowed.
"""


def __getattr__(name: str) -> object:
    import importlib  # (here: a name at this module's top would stand in front of numpy's)

    value = getattr(importlib.import_module("numpy"), name)
    globals()[name] = value
    return value
