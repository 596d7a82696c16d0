"""What keeps a process honest: supervised background loops and task sets (`loops.py`), the
SIGTERM drain (`drain.py`), reading the fleet secret at start (`sealing.py`). The composition
root that builds every service sits above the services, in `proxy/runtime.py`."""
