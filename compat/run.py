"""`make compat`: the real clients against `make run`'s stack, in two sets of versions.

- `pinned`: the versions compat/requirements.txt and compat/package.json name, which a failure
  can be reproduced with;
- `newest`: the same packages at the newest versions the registries publish today, each at
  least its floor in `NEWEST_FLOORS` (the releases whose surface the proxy serves), so that a
  client release that breaks the proxy shows up before a user finds it.

1. Installs each set outside the project tree, in `$COMPAT_HOME` (default
   `~/.cache/responses-proxy-compat`): a venv and an npm folder per set. The pinned set is
   re-installed only when its files change; the newest set is upgraded on every run.
2. Starts deploy/run-dev.sh (the simulator and the proxy, embedded store) on free ports.
3. Runs each client (compat/clients/) of each set with a timeout, prints `PASS [set] name` or
   `FAIL [set] name` with the failing checks, then a summary with the versions each set ran;
   exits 1 when anything failed.

Not part of `make test`: it downloads the clients. `COMPAT_SETS=newest` (or `pinned`) runs one
set; `COMPAT_ONLY=python_sdk,codex` runs some clients; `COMPAT_TIMEOUT` is each client's limit
in seconds (default 180); `COMPAT_VERBOSE=1` prints tracebacks. The stack's log is kept in
`$COMPAT_HOME/logs/stack.log`, the versions and results of the last run in
`$COMPAT_HOME/logs/results.json`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HOME = Path(os.environ.get("COMPAT_HOME") or
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
            / "responses-proxy-compat")
INSTALL_TIMEOUT = 900.0
CLIENT_TIMEOUT = float(os.environ.get("COMPAT_TIMEOUT", "180"))
# The newest set must reach these: the releases with the late-2026 Responses surface (WebSocket
# lanes, steering, tool search). A registry whose newest is older fails the run, saying so.
NEWEST_FLOORS = {"pip:openai": "3.57", "npm:openai": "7.59", "npm:@openai/codex": "0.171"}


@dataclass(frozen=True)
class VersionSet:
    """One set of client versions and where it is installed."""

    name: str
    py: Path  # its venv
    node: Path  # its npm folder

    @property
    def python(self) -> Path:
        return self.py / "bin" / "python"


PINNED = VersionSet("pinned", HOME / "py", HOME / "node")
NEWEST = VersionSet("newest", HOME / "py-newest", HOME / "node-newest")


@dataclass(frozen=True)
class Client:
    name: str
    argv: list[str]
    cwd: Path


def _stamp_ok(directory: Path, source: Path) -> bool:
    stamp = directory / ".compat-installed"
    return stamp.exists() and stamp.read_text() == _digest(source)


def _digest(source: Path) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()


def _run(argv: list[str], cwd: Path | None = None) -> None:
    print(f"compat: {' '.join(argv)}", flush=True)
    subprocess.run(argv, cwd=cwd, check=True, timeout=INSTALL_TIMEOUT,
                   stdout=subprocess.DEVNULL)


def pip_names() -> list[str]:
    """The Python clients, named as compat/requirements.txt pins them."""
    lines = (HERE / "requirements.txt").read_text().splitlines()
    return [line.split("==")[0].strip() for line in lines
            if line.strip() and not line.lstrip().startswith("#")]


def npm_names() -> list[str]:
    return list(json.loads((HERE / "package.json").read_text())["dependencies"])


def _venv(where: VersionSet) -> None:
    if not where.python.exists():
        _run([sys.executable, "-m", "venv", "--clear", str(where.py)])


def _npm() -> None:
    if shutil.which("npm") is None:
        raise SystemExit("compat: npm is missing (Node 20 or later is needed)")


def install_pinned() -> None:
    requirements = HERE / "requirements.txt"
    if not _stamp_ok(PINNED.py, requirements):
        _venv(PINNED)
        _run([str(PINNED.python), "-m", "pip", "install", "--quiet", "-r", str(requirements)])
        (PINNED.py / ".compat-installed").write_text(_digest(requirements))
    package = HERE / "package.json"
    if not _stamp_ok(PINNED.node, package):
        _npm()
        PINNED.node.mkdir(parents=True, exist_ok=True)
        shutil.copy(package, PINNED.node / "package.json")
        _run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=PINNED.node)
        (PINNED.node / ".compat-installed").write_text(_digest(package))


def install_newest() -> None:
    """Every client at the newest version its registry publishes now (no pins, no lock file
    kept): pip's `--upgrade` and npm's `@latest` ask the registry on each run."""
    _venv(NEWEST)
    _run([str(NEWEST.python), "-m", "pip", "install", "--quiet", "--upgrade", *pip_names()])
    _npm()
    NEWEST.node.mkdir(parents=True, exist_ok=True)
    manifest = {"name": "responses-proxy-compat-newest", "private": True, "type": "module"}
    (NEWEST.node / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (NEWEST.node / "package-lock.json").unlink(missing_ok=True)
    _run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error",
          *(f"{name}@latest" for name in npm_names())], cwd=NEWEST.node)


def install(where: VersionSet) -> None:
    if where is PINNED:
        install_pinned()
    else:
        install_newest()
    # The Node scripts import the packages installed beside them.
    scripts = where.node / "clients"
    scripts.mkdir(exist_ok=True)
    for script in (HERE / "clients").glob("*.mjs"):
        shutil.copy(script, scripts / script.name)


def versions(where: VersionSet) -> dict[str, str]:
    found: dict[str, str] = {}
    pip = subprocess.run([str(where.python), "-m", "pip", "list", "--format=json"],
                         capture_output=True, text=True, timeout=60, check=False)
    if pip.returncode == 0:
        wanted = set(pip_names())
        for entry in json.loads(pip.stdout):
            if entry["name"].lower() in wanted:
                found[f"pip:{entry['name'].lower()}"] = entry["version"]
    for name in npm_names():
        manifest = where.node / "node_modules" / name / "package.json"
        if manifest.exists():
            found[f"npm:{name}"] = json.loads(manifest.read_text())["version"]
    found["node"] = subprocess.run(["node", "--version"], capture_output=True, text=True,
                                   timeout=30, check=False).stdout.strip()
    return found


def _release(version: str) -> tuple[int, ...]:
    """`0.171.0` -> (0, 171, 0); a pre-release's suffix is ignored (`7.59.0-beta.1`)."""
    numbers = []
    for part in version.split("-")[0].split("+")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def below_floors(found: dict[str, str]) -> list[str]:
    """What the newest set installed below its floor (or not at all)."""
    short = []
    for name, floor in NEWEST_FLOORS.items():
        have = found.get(name)
        if have is None or _release(have) < _release(floor):
            short.append(f"{name} {have or 'missing'} is below {floor}")
    return short


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Stack:
    """deploy/run-dev.sh (what `make run` starts) on free ports, in its own process group."""

    def __init__(self) -> None:
        self.port = free_port()
        self.sim_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (HOME / "logs").mkdir(parents=True, exist_ok=True)
        self.log_path = HOME / "logs" / "stack.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
        env.update(PROXY_PORT=str(self.port), SIM_PORT=str(self.sim_port),
                   SIM_TOKEN_DELAY_MS="2")
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(["bash", "deploy/run-dev.sh"], cwd=ROOT, env=env,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"compat: the stack exited; see {self.log_path}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"compat: the stack was not ready in {timeout:.0f}s; see "
                         f"{self.log_path}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


def sets() -> list[VersionSet]:
    chosen = {n.strip() for n in os.environ.get("COMPAT_SETS", "").split(",") if n.strip()}
    unknown = chosen - {PINNED.name, NEWEST.name}
    if unknown:
        raise SystemExit(f"compat: COMPAT_SETS names no set: {', '.join(sorted(unknown))} "
                         "(pinned, newest)")
    return [s for s in (PINNED, NEWEST) if not chosen or s.name in chosen]


def clients(where: VersionSet) -> list[Client]:
    python = str(where.python)
    scripts = where.node / "clients"
    every = [
        Client("python_sdk", [python, "python_sdk.py"], HERE / "clients"),
        Client("openai_agents", [python, "agents_sdk.py"], HERE / "clients"),
        Client("openai_agents_ws", [python, "agents_ws.py"], HERE / "clients"),
        Client("node_sdk", ["node", "node_sdk.mjs"], scripts),
        Client("ai_sdk", ["node", "ai_sdk.mjs"], scripts),
        Client("codex", [python, "codex_cli.py"], HERE / "clients"),
    ]
    if where is NEWEST:  # WebSocket lanes and steering arrived in openai 3.57 (pinned: 3.54)
        every.append(Client("python_sdk_ws_lanes", [python, "ws_lanes.py"], HERE / "clients"))
    only = {n.strip() for n in os.environ.get("COMPAT_ONLY", "").split(",") if n.strip()}
    return [c for c in every if not only or c.name in only]


def run_client(client: Client, base_url: str, where: VersionSet) -> tuple[bool, list[str]]:
    env = {**os.environ, "COMPAT_BASE_URL": base_url + "/v1", "COMPAT_MODEL": "sim-model",
           "COMPAT_API_KEY": "compat-key", "PYTHONUNBUFFERED": "1",
           "COMPAT_CODEX": str(where.node / "node_modules" / ".bin" / "codex")}
    env.pop("OPENAI_BASE_URL", None)  # the clients must reach our proxy, nothing else
    proc = subprocess.Popen(client.argv, cwd=client.cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=CLIENT_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return False, [f"timed out after {CLIENT_TIMEOUT:.0f}s", *output.splitlines()[-5:]]
    lines = output.splitlines()
    if proc.returncode == 0:
        return True, [line for line in lines if line.startswith("ok ")]
    failures = [line for line in lines if line.startswith("FAIL ")]
    return False, failures or [f"exit {proc.returncode}", *lines[-10:]]


def prepare(where: VersionSet) -> tuple[dict[str, str], list[str]]:
    """Install a set; its versions, and what keeps it from running (empty when it can run)."""
    try:
        install(where)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        return {}, [f"installing the clients failed: {exc}"]
    found = versions(where)
    print(f"compat [{where.name}]: " + ", ".join(f"{k} {v}" for k, v in found.items()),
          flush=True)
    return found, below_floors(found) if where is NEWEST else []


def run_set(where: VersionSet, stack: Stack) -> list[tuple[str, bool]]:
    results = []
    for client in clients(where):
        started = time.monotonic()
        passed, details = run_client(client, stack.url, where)
        took = time.monotonic() - started
        print(f"{'PASS' if passed else 'FAIL'} [{where.name}] {client.name} ({took:.1f}s)",
              flush=True)
        for line in details:
            print(f"    {line}", flush=True)
        results.append((f"{where.name}:{client.name}", passed))
    return results


def main() -> int:
    chosen = sets()
    ready: list[VersionSet] = []
    record: dict[str, dict[str, object]] = {}
    results: list[tuple[str, bool]] = []
    for where in chosen:
        found, problems = prepare(where)
        record[where.name] = {"versions": found, "problems": problems}
        for problem in problems:
            print(f"FAIL [{where.name}] {problem}", flush=True)
        if problems:
            results.append((f"{where.name}:install", False))
        else:
            ready.append(where)
    stack = Stack()
    if ready:
        stack.start()
    try:
        for where in ready:
            ran = run_set(where, stack)
            record[where.name]["results"] = dict(ran)
            results += ran
    finally:
        stack.stop()
    (HOME / "logs").mkdir(parents=True, exist_ok=True)
    (HOME / "logs" / "results.json").write_text(json.dumps(record, indent=2) + "\n")
    failed = [name for name, passed in results if not passed]
    print(f"compat: {len(results) - len(failed)} passed, {len(failed)} failed"
          + (f" ({', '.join(failed)}); stack log: {stack.log_path}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
