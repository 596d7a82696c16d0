"""Tools between the client and the fleet: their names both ways (`toolnames.py`), a custom
tool's input (`custominput.py`), the sources an answer cites (`citations.py`)."""
