"""Reliability harnesses: `make chaos` (reliability/chaos.py: one fault at a time,
what the client saw, what is stored afterwards, lost and duplicated counts) and `make soak`
(reliability/soak.py: mixed traffic at concurrency 64 on two instances and one Redis, sampled
for leaks). Both start real processes through tests/support/servers.py, the same helpers the
e2e tests use, and every run is bounded in time."""
