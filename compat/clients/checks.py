"""A tiny check runner for the Python compat clients: each check runs, prints `ok NAME` or
`FAIL NAME: error`, and the script exits 1 if any failed. No dependency on the project: these
scripts run in the compat venv, with only the client libraries installed."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

BASE_URL = os.environ["COMPAT_BASE_URL"]  # the proxy's /v1
MODEL = os.environ.get("COMPAT_MODEL", "sim-model")
API_KEY = os.environ.get("COMPAT_API_KEY", "compat-key")

_failed: list[str] = []


def check(name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def run(fn: Callable[[], None]) -> Callable[[], None]:
        try:
            fn()
        except Exception as exc:  # report and go on: one client, several checks
            _failed.append(name)
            detail = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:600]
            print(f"FAIL {name}: {detail}", flush=True)
            if os.environ.get("COMPAT_VERBOSE"):
                traceback.print_exc()
        else:
            print(f"ok {name}", flush=True)
        return fn
    return run


def expect(condition: object, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def finish() -> None:
    sys.exit(1 if _failed else 0)
