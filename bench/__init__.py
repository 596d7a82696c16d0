"""`make bench`: the proxy against the direct upstream, side by side, in one run.

What is measured: streamed tokens per second, requests per second, time to the first content
token, total latency and the proxy's CPU time per 1,000 streamed tokens, for five ways of
getting the same 256-token answer out of the bundled vLLM simulator (`systems.py`), at several
concurrencies and per-token delays, every system in turn within each cell so that slow drift of
the machine hits all of them alike. Every stream is checked (`checks.py`): a stream that is
short, cut or wrongly terminated is an error, so a broken proxy cannot look fast.

Modules, one concept each:
    options   the command line and its defaults
    procs     child processes: start pinned to cores, stop, read their CPU from /proc
    stack     the servers under test (redis-server, the simulator, the proxy) as one unit
    systems   the five systems: what one request is and how its stream is checked
    checks    byte-level stream checkers (chat and Responses)
    client    a minimal HTTP/1.1 keep-alive client on asyncio + httptools
    loadgen   one closed-loop row: N clients, a ramp, a measured window, a drain
    matrix    every system in every cell, interleaved; disturbed rows run again
    stats     percentiles and the per-row summary
    targets   the issue's targets, evaluated (reported, never asserted)
    machine   what the numbers were measured on
    report    the table, docs/BENCHMARKS.md and the raw JSON
    run       the command line: `python -m bench.run`
    clients   `python -m bench.clients`: our upstream client against aiohttp's, in one run
    aiohttp_upstream  that comparison's aiohttp adapter (needs `pip install aiohttp`)
    scenarios `python -m bench.scenarios`: Redis beside the proxy or apart, the burst, short
              answers (requests per CPU-second), `serve --workers 1` against 2, unpinned and
              with a CPU budget per process
    cores     the budgeted rows: `serve --workers 1, 2, 4` under a CPU quota per process,
              stated per core (tokens/s, streams at 20 ms/token, requests/s)
    cgroups   CPU budgets: one cgroup per process with a CFS quota, always removed after
    spy       `--spy`: a py-spy sampling profile of the proxy per row, summarised by function
              and by bucket, in µs per token
    appends   `python -m bench.appends`: ways to write an event-log flush, side by side (CPU
              time or, `--count`, Redis's instructions)
    eventwriter  `python -m bench.eventwriter`: the event-log writer alone, Python opcodes and
              CPU per stored token
    scriptcalls  `python -m bench.scriptcalls`: a store script call alone against coalesced
    burstsetup   `python -m bench.burstsetup`: a burst's set-up CPU per request, /healthz to
              stored streams
    instructions `python -m bench.instructions`: the store's cost per token and a stream's
              set-up in instructions (callgrind), side by side with another commit: figures
              this VM's neighbours cannot move
    cache     `python -m bench.cache`: the response cache's hit and miss latency
    fleet     `python -m bench.fleet`: routing policies on three simulators with prefix caches
    wsloop    `python -m bench.wsloop`: a tool-calling agent loop over WebSocket vs HTTP+SSE
"""
