"""The results, written three ways: table lines as rows finish, docs/BENCHMARKS.md, raw JSON.

docs/BENCHMARKS.md keeps a hand-written part (method and findings, owned by people) above the
generated part, which sits between `BEGIN` and `END` markers and is replaced whole on every
run that writes the docs; anything outside the markers is never touched. A file without the
markers gets them appended at its end.

The JSON under bench/results/ (git-ignored) has everything: machine, command, pinning as read
back from /proc, options, every row's summary and every request's raw sample
(start, ttft, latency, tokens, error).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.loadgen import Sample
from bench.stats import Row
from bench.targets import Target

BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"

COLUMNS = ("delay", "conc", "system", "req/s", "tok/s", "x direct", "TTFT p50", "p95", "p99",
           "dTTFT p50", "lat p50", "lat p99", "proxy CPU ms/1k tok", "proxy core %",
           "load core %", "others %", "errors")
UNITS = ("ms", "", "", "", "", "", "ms", "ms", "ms", "ms", "ms", "ms", "", "", "", "", "")

HAND_WRITTEN = """# Benchmarks

`make bench` runs the proxy against the direct upstream (the bundled vLLM simulator), side by
side, in one run: the code is in `bench/` (`bench/__init__.py` lists its modules), the method in
each module's docstring. Options: `python -m bench.run --help`; a smoke run under a minute:
`.venv/bin/python -m bench.run --quick`.

## Profiling notes

(Hand-written: the generated section below is replaced on every full run; this part is not.)

"""


def _num(value: float | None, digits: int = 1, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def load_cores_busy(row: Row, load_cores: Sequence[int]) -> float | None:
    values = [row.core_busy_pct[c] for c in load_cores if c in row.core_busy_pct]
    return sum(values) / len(values) if values else None


def cells(row: Row, load_cores: Sequence[int]) -> list[str]:
    cpu = _num(row.proxy_cpu_ms_per_1k)
    if row.proxy_cpu_ms_per_1k is not None and row.proxy_cpu_ticks < 20:
        cpu = "~" + cpu  # fewer than 20 clock ticks: coarse
    tps = f"{row.tps:.0f}" + ("*" if row.hit_max else "")
    return [f"{row.delay_ms:g}", str(row.concurrency), row.system, f"{row.rps:.1f}", tps,
            _num(row.tps_ratio, 3), _num(row.ttft_ms["p50"]), _num(row.ttft_ms["p95"]),
            _num(row.ttft_ms["p99"]), _num(row.ttft_p50_delta_ms, 1, signed=True),
            _num(row.latency_ms["p50"], 0), _num(row.latency_ms["p99"], 0), cpu,
            _num(row.proxy_core_pct, 0), _num(load_cores_busy(row, load_cores), 0),
            "/".join(f"{v:.0f}" for v in row.others_pct.values()) or "-", str(row.errors)]


def table_header() -> str:
    head = [f"{c} ({u})" if u else c for c, u in zip(COLUMNS, UNITS, strict=True)]
    return "| " + " | ".join(head) + " |\n|" + "|".join(
        "---:" if i not in (2,) else "---" for i in range(len(head))) + "|"


def table_line(row: Row, load_cores: Sequence[int]) -> str:
    return "| " + " | ".join(cells(row, load_cores)) + " |"


def targets_lines(targets: Sequence[Target]) -> list[str]:
    lines: list[str] = []
    for target in targets:
        if not target.measured:
            lines.append(f"- **not measured**: {target.name} (its rows were not run)")
            continue
        missed = [c for c in target.checks if not c.met]
        if not missed and len(target.checks) > 4:
            lines.append(f"- **met** in all {len(target.checks)} rows: {target.name}")
            continue
        if not missed:
            values = ", ".join(f"{c.row} {c.value}" for c in target.checks)
            lines.append(f"- **met**: {target.name} ({values})")
            continue
        lines.append(f"- **missed** in {len(missed)} of {len(target.checks)} rows: "
                     f"{target.name}")
        lines.extend(f"  - {c.row}: {c.value}, missed by {c.miss}" for c in missed)
    return lines


def harness_lines(rows: Sequence[Row], load_cores: Sequence[int]) -> list[str]:
    """Evidence that the load side was not the bottleneck: the direct rows (simulator + load
    generator only) against the load they were offered, and what the load core had to spare."""
    lines: list[str] = []
    for row in rows:
        if row.system != "direct":
            continue
        busy = load_cores_busy(row, load_cores)
        cost = row.load_cpu_ms_per_1k
        share = f"{cost * row.tps / 10_000:.0f}% of a core" if cost is not None else "-"
        offered = ""
        if row.delay_ms > 0:
            rate = row.concurrency * 1000.0 / row.delay_ms
            offered = f" of {rate:.0f} offered ({row.tps / rate:.3f})"
        lines.append(f"- direct {row.concurrency}x{row.delay_ms:g}ms: {row.tps:.0f} tok/s"
                     f"{offered}; load core(s) {_num(busy, 0)}% busy, of which the load "
                     f"generator {share} ({_num(cost)} ms CPU per 1,000 tokens)")
    return lines


def notes_lines(rows: Sequence[Row]) -> list[str]:
    lines: list[str] = []
    for row in rows:
        for note in row.notes:
            lines.append(f"- {row.system} {row.concurrency}x{row.delay_ms:g}ms: {note}")
        if row.error_kinds:
            kinds = ", ".join(f"{n} x {k}" for k, n in row.error_kinds.items())
            lines.append(f"- {row.system} {row.concurrency}x{row.delay_ms:g}ms errors: {kinds}")
    return lines


def _wake_line(machine: dict[str, Any]) -> list[str]:
    """The machine's wake-up cost (bench/machine.py `wake_cpu_us`), when the run measured it."""
    wake = machine.get("wake_cpu_us")
    if not wake:
        return []
    figures = ", ".join(f"{cpu:g} µs after a {sleep} sleep" for sleep, cpu in wake.items())
    return [f"- CPU charged per wake-up from idle: {figures} (a 20 ms/token stream pays one "
            "per token when the proxy idles between tokens)"]


def render(meta: dict[str, Any], rows: Sequence[Row], targets: Sequence[Target],
           load_cores: Sequence[int]) -> str:
    m = meta["machine"]
    packages = ", ".join(f"{k} {v}" for k, v in m["packages"].items())
    out = [
        "## Latest run (generated by `python -m bench.run`; do not edit by hand)",
        "",
        f"- date: {m['date']}; proxy commit {m['commit']}",
        f"- machine: {m['cpu']}, {m['cores']} cores (usable: "
        f"{','.join(str(c) for c in m['usable_cores'])}), {m['memory_gib']} GiB, "
        f"Linux {m['kernel']}",
        f"- Python {m['python']} ({m['implementation']}); {packages}; {m['redis']}",
        *_wake_line(m),
        f"- command: `{meta['command']}`",
        f"- proxy: `{meta['proxy_command']}`; idle it burns "
        f"{meta['proxy_idle_cpu_ms_per_s']:.1f} ms CPU per second",
        f"- proxy flags: {meta.get('proxy_flags', '-')}",
        f"- {meta['proxy_source']}",
        f"- pinning: {meta['pinning']['plan']}",
    ]
    out += [f"  - {name}: threads allowed on cpu {masks}"
            for name, masks in meta["pinning"]["verified"].items()]
    out += ["", meta["method"], "", table_header()]
    out += [table_line(r, load_cores) for r in rows]
    out += ["", "`*` the window hit `--max-seconds` before two full waves; `~` fewer than 20 "
            "clock ticks of proxy CPU in the row (coarse). dTTFT p50 and x direct: against "
            "`direct` of the same cell. proxy core %: the proxy process's CPU over the window "
            "(100 = its core saturated); load core %: busy share of the load core(s); others %: "
            "CPU that other processes on the machine used on the proxy core / the load core(s) "
            "(a row over 10% is run again, see the row notes).", "",
            "### Targets (from the issue; reported, not asserted)", ""]
    out += targets_lines(targets)
    out += ["", "### Is the harness the bottleneck?", ""]
    out += harness_lines(rows, load_cores) or ["- (no direct rows)"]
    notes = notes_lines(rows)
    if notes:
        out += ["", "### Row notes", "", *notes]
    out += ["", f"Raw results: `{meta['json']}`"]
    return "\n".join(out) + "\n"


def write_docs(path: Path, generated: str) -> None:
    text = path.read_text() if path.exists() else HAND_WRITTEN
    block = f"{BEGIN}\n{generated}{END}\n"
    if BEGIN in text and END in text and text.index(BEGIN) < text.index(END):
        head = text[:text.index(BEGIN)]
        tail = text[text.index(END) + len(END):].lstrip("\n")
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _row_json(row: Row, samples: Sequence[Sample]) -> dict[str, Any]:
    data = dataclasses.asdict(row)
    data["core_busy_pct"] = {str(k): v for k, v in row.core_busy_pct.items()}
    data["samples"] = {"fields": ["start_s", "ttft_s", "latency_s", "tokens", "error"],
                       "rows": [[s.start, s.ttft, s.latency, s.tokens, s.error]
                                for s in samples]}
    return data


def json_path(directory: Path) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return directory / f"bench-{stamp}.json"


def write_json(path: Path, meta: dict[str, Any], rows: Sequence[Row],
               samples: Sequence[Sequence[Sample]], targets: Sequence[Target]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        **meta,
        "rows": [_row_json(r, s) for r, s in zip(rows, samples, strict=True)],
        "targets": [{"name": t.name, "measured": t.measured, "met": t.met,
                     "checks": [dataclasses.asdict(c) for c in t.checks]} for t in targets],
    }
    path.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2
                                  | orjson.OPT_NON_STR_KEYS))
