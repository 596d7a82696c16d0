"""Background jobs: submit and cancel (`background.py`), the worker (`runner.py`: take, run,
heartbeat, reclaim, acknowledge; queue mechanics only, the generation comes from
`generation/`). The job's spec lives with the generation it describes (`generation/spec.py`)."""
