"""Choosing a replica, as pure functions of the replicas' states: the balancer (`balancer.py`),
the fair queue of waiting requests (`fairqueue.py`), a replica's load from its metrics
(`replicaload.py`), the routing policies (`routing.py`)."""
