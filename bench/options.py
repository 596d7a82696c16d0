"""The command line of `python -m bench.run`, and what the defaults add up to.

    (default)   the full matrix: every system, concurrency 1,16,64,256, 0 and 20 ms/token,
                256-token answers, windows of at least 5 s and two full waves (at most 30 s);
                it writes docs/BENCHMARKS.md
    --quick     a smoke run under a minute: concurrency 1 and 16, 20 ms/token only, 64-token
                answers (1.3 s each), one wave and a 1.5 s minimum per window
    --systems, --concurrency, --delays, --tokens, --seconds, --max-seconds, --waves: any part
                of the matrix (a partial matrix prints and saves JSON; `--docs` writes the docs)
    --retries   how often a row disturbed by other work on the machine is run again
    --profile   the proxy under cProfile: where its time goes (the CPU figures are inflated)
    --spy       a py-spy sampling profile of the proxy during each row through it (`spy.py`):
                the top functions and buckets, also in µs per token, printed and written as
                markdown under bench/results/ (the CPU figures stay honest)
    --spy-blocking  the same, py-spy pausing the proxy for each sample: whole stacks (with
                `--spy`, a fifth to a half of the stacks lose their root), but the row runs slower
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import spy
from bench.systems import STREAM_SYSTEM_NAMES, SYSTEMS

ROOT = Path(__file__).resolve().parents[1]
FULL_CONCURRENCY = (1, 16, 64, 256)
FULL_DELAYS = (0.0, 20.0)
FULL_TOKENS = 256
IDLE_SECONDS = 3.0


@dataclass
class Options:
    systems: list[str]
    concurrency: list[int]
    delays: list[float]
    tokens: int
    seconds: float
    max_seconds: float
    waves: int
    warmup_seconds: float
    retries: int
    quick: bool
    docs: bool | None  # None: only for the full default matrix
    docs_path: Path
    results_dir: Path
    argv: list[str] = field(default_factory=list)
    profile: bool = False  # the proxy under cProfile (skews its CPU; never written to docs)
    spy: bool = False  # a py-spy profile of each row through the proxy (never written to docs)
    spy_blocking: bool = False  # py-spy pauses the proxy per sample (whole stacks)
    capture: bool = False  # keep each row's first body (for tests)
    idle_seconds: float = IDLE_SECONDS  # how long the idle proxy's CPU is measured

    @property
    def full_matrix(self) -> bool:
        return (not self.quick and self.systems == list(STREAM_SYSTEM_NAMES)
                and tuple(self.concurrency) == FULL_CONCURRENCY
                and tuple(self.delays) == FULL_DELAYS and self.tokens == FULL_TOKENS)

    @property
    def write_docs(self) -> bool:
        if self.profile or self.spy:
            return False
        return self.docs if self.docs is not None else self.full_matrix


def module_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of `python -m <module>` (a bench command): its docstring, as written, for
    `--help`."""
    return argparse.ArgumentParser(prog=f"python -m {module}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def _list(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            return [kind(part) for part in text.split(",") if part.strip()]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def _parser() -> argparse.ArgumentParser:
    parser = module_parser("bench.run", __doc__)
    parser.add_argument("--quick", action="store_true", help="smoke run, under a minute")
    parser.add_argument("--systems", type=_list(str),
                        help=f"comma-separated, from {','.join(SYSTEMS)} (default: the streamed "
                             f"ones, {','.join(STREAM_SYSTEM_NAMES)})")
    parser.add_argument("--concurrency", type=_list(int), help="default 1,16,64,256")
    parser.add_argument("--delays", type=_list(float), help="ms per token, default 0,20")
    parser.add_argument("--tokens", type=int, help="tokens per answer (default 256; quick 64)")
    parser.add_argument("--seconds", type=float,
                        help="minimum measured window per row (default 5; quick 1.5)")
    parser.add_argument("--max-seconds", type=float, default=30.0,
                        help="longest measured window per row (default 30)")
    parser.add_argument("--waves", type=int,
                        help="requests per client the window waits for (default 2; quick 1)")
    parser.add_argument("--warmup-seconds", type=float, help="per system (default 2; quick 0.5)")
    parser.add_argument("--retries", type=int, default=1,
                        help="re-runs of a row that other work on the machine disturbed "
                             "(default 1)")
    parser.add_argument("--profile", action="store_true",
                        help="run the proxy under cProfile; print its top functions at the end "
                             "(its CPU figures are inflated; docs are not written)")
    spy.add_arguments(parser, "each row through it")
    docs = parser.add_mutually_exclusive_group()
    docs.add_argument("--docs", dest="docs", action="store_true", default=None,
                      help="write docs/BENCHMARKS.md even for a partial matrix")
    docs.add_argument("--no-docs", dest="docs", action="store_false",
                      help="never write docs/BENCHMARKS.md")
    parser.add_argument("--results-dir", type=Path, default=ROOT / "bench" / "results")
    return parser


def parse_options(argv: Sequence[str]) -> Options:
    parser = _parser()
    args = parser.parse_args(argv)
    quick = bool(args.quick)
    options = Options(
        systems=args.systems or list(STREAM_SYSTEM_NAMES),
        concurrency=args.concurrency or ([1, 16] if quick else list(FULL_CONCURRENCY)),
        delays=args.delays or ([20.0] if quick else list(FULL_DELAYS)),
        tokens=args.tokens or (64 if quick else FULL_TOKENS),
        seconds=args.seconds if args.seconds is not None else (1.5 if quick else 5.0),
        max_seconds=args.max_seconds,
        waves=args.waves if args.waves is not None else (1 if quick else 2),
        warmup_seconds=args.warmup_seconds if args.warmup_seconds is not None
        else (0.5 if quick else 2.0),
        retries=args.retries, quick=quick, docs=args.docs, profile=bool(args.profile),
        spy=bool(args.spy or args.spy_blocking), spy_blocking=bool(args.spy_blocking),
        docs_path=ROOT / "docs" / "BENCHMARKS.md", results_dir=args.results_dir,
        argv=list(argv),
    )
    if options.profile and options.spy:
        parser.error("--profile and --spy: choose one (cProfile would skew py-spy's profile)")
    unknown = [s for s in options.systems if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown system(s) {','.join(unknown)}; use {','.join(SYSTEMS)}")
    if (not options.concurrency or any(c < 1 for c in options.concurrency)
            or not options.delays or any(d < 0 for d in options.delays)
            or options.tokens < 1 or options.seconds < 0 or options.max_seconds <= 0
            or options.waves < 0 or options.retries < 0):
        parser.error("concurrency and tokens must be >= 1; delays, seconds, waves and "
                     "retries >= 0")
    return options
