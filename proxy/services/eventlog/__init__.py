"""Everything about a response's event log, and ending a response: the one door (`log.py`,
`EventLog`), batched writes (`writer.py`), the stored side of a turn (`recorder.py`), final
writes retried and reconciled (`durable.py`), live tails (`follow.py`), reading a log in pages
(`pages.py`), the writers' leases and the sweep of dead ones (`ownership.py`), closing a
response whose writer is gone (`ending.py`). This room owns "ending a response": the worker's
reclaim and the lease sweep both end one through `EventLog.end`."""
