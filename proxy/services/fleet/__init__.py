"""The fleet: replica health, models and choice (`fleet.py`), flow control (`admission.py`), a
burst's set-ups a few at a time in arrival order (`setups.py`, `--setup-slots`, off by default),
the one way to open an upstream call (`gateway.py`), the chat pass-through (`passthrough.py`),
media fetched for the fleet under `--fetch-allow` (`media.py`)."""
