"""The process around the app: entry points' machinery, above the composition root.

    server.py       uvicorn, serving the app, and its graceful shutdown
    prefork.py      several worker processes on one port
    worker.py       `responses-proxy worker`: background jobs and nothing else
    gctune.py       the garbage collector's tuning at start
    headtimeout.py  the bound on a client's request head (uvicorn's protocols)
    headwrite.py    a response's head written with its first body bytes

May import every room (tests/unit/test_layers.py).
"""
