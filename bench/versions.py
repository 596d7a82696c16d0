"""`python -m bench.versions --baseline REF`: this tree's proxy and the proxy of an earlier commit,
side by side, in one run against one simulator and one redis-server.

Two matrix runs, one per tree, are not a comparison: each starts its own simulator (whose chunks
change between releases), and minutes of drift on a shared machine fall on one side only. Here
the baseline's source is exported (`git archive REF`) into a temporary folder and its
`python -m proxy serve` runs from there (its own package first on the path: `cwd` is its root)
with the same interpreter, the same flags (every flag at its default), beside this tree's proxy.
Rows are bench/servers.py's: the matrix's own load generator, stream checks and CPU figures,
interleaved proxy by proxy within each load, `--rounds` times, the order rotated every round.
The table gives medians and the ratio of this tree's proxy CPU to the baseline's
(`CPU vs REF`: under 1.00x is cheaper).

    python -m bench.versions --baseline c9e4875 --loads long,store --rounds 3

Loads (`--loads`, default all of bench/servers.py `LOADS`: long, store, short, short-store,
long-128, store-128).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.options import module_parser
from bench.procs import Service, free_port
from bench.servers import LOADS, Starter, parse_rounds, round_arguments, run, table
from bench.stack import Stack, http_ok

ROOT = Path(__file__).resolve().parents[1]
CURRENT = "current"


def export(ref: str, into: Path) -> str:
    """REF's tracked files under `into`; returns the commit's short name."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref],
                            check=True, capture_output=True, text=True).stdout.strip()
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", commit],
                               stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {ref} failed")
    return commit


def tree_env(tree: Path, env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a process that runs `tree`'s proxy from `tree` (its root as the working
    folder), once `tree`'s own package is what `import proxy` finds there.

    Why checked: this tree is installed in the interpreter (`pip install -e .`), so a `tree`
    without its package, e.g. one started before `export` wrote it, imports this tree's proxy
    instead, and a side-by-side run compares this tree with itself. `bench.wsloop --baseline`
    did exactly that until 30 Nov 2026 (docs/BENCHMARKS.md, "Round 4, the closing run")."""
    ready = {**env, "PYTHONPATH": str(tree)}
    found = subprocess.run([sys.executable, "-c", "import proxy; print(proxy.__file__)"],
                           cwd=tree, env=ready, capture_output=True, text=True, timeout=60)
    origin = Path(found.stdout.strip()).resolve() if found.returncode == 0 else None
    if origin is None or not origin.is_relative_to(tree.resolve()):
        raise RuntimeError(f"`import proxy` from {tree} finds {origin or found.stderr.strip()!r},"
                           " not that tree's package: export it before starting its proxy")
    return ready


def starter(tree: Path) -> Starter:
    """Starts the proxy of `tree` with the stack's own arguments, from `tree`'s root."""
    def start(stack: Stack, name: str, log_dir: Path) -> tuple[Service, int]:
        port = free_port()
        args = list(stack.proxy.args)
        args[args.index("--port") + 1] = str(port)
        env = tree_env(tree, stack.proxy.env or os.environ)
        service = Service(f"proxy-{name}", args, log_dir / f"proxy-{name}.log",
                          stack.options.pinning.proxy, env, cwd=tree)
        service.start(lambda: http_ok(port, "/healthz") and http_ok(port, "/readyz"))
        return service, port
    return start


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench.versions", __doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--baseline", help="the commit to compare with")
    source.add_argument("--tree", type=Path,
                        help="a prepared source folder to compare with instead (e.g. this "
                        "tree with modules compiled); kept as it is")
    round_arguments(parser, tuple(LOADS), rounds=3)
    args = parse_rounds(parser, argv)
    tree = args.tree.resolve() if args.tree else Path(tempfile.mkdtemp(prefix="bench-baseline-"))
    try:
        baseline = export(args.baseline, tree) if args.baseline else tree.name
        results = run([CURRENT, baseline], [LOADS[name] for name in args.loads], args.rounds,
                      args.seconds, ours=CURRENT, start=starter(tree), label="versions")
    finally:
        if args.baseline:
            shutil.rmtree(tree, ignore_errors=True)
    print()
    for line in table(results, ours=baseline, column="proxy"):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
