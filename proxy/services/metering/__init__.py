"""Per-key limits and metering: admission and settlement of each request (`meter.py`, one path
for every entry point), the limits held in Redis across instances (`limits.py`)."""
