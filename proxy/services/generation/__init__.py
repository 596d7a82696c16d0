"""One generation, for the create path and the worker alike: built once (`builder.py`), run
(`run.py`: upstream → assembler → event log → caller), whole or as the MCP tool loop over
several upstream turns (`toolloop.py`), described for later by a typed, versioned `JobSpec`
(`spec.py`). Below both `responses/` and `jobs/`, so neither imports the other's internals."""
