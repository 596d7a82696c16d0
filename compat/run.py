"""`make compat`: the real clients against `make run`'s stack.

1. Installs the clients outside the project tree, in `$COMPAT_HOME` (default
   `~/.cache/responses-proxy-compat`): a venv with compat/requirements.txt, and npm packages from
   compat/package.json. Re-installed only when those files change.
2. Starts deploy/run-dev.sh (the simulator and the proxy, embedded store) on free ports.
3. Runs each client (compat/clients/) with a timeout, prints `PASS name` or `FAIL name` with the
   failing checks, then a summary; exits 1 when anything failed.

Not part of `make test`: it downloads the clients. `COMPAT_ONLY=python_sdk,codex` runs some;
`COMPAT_TIMEOUT` is each client's limit in seconds (default 180); `COMPAT_VERBOSE=1` prints
tracebacks. The stack's log is kept in `$COMPAT_HOME/logs/stack.log`.
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
PY = HOME / "py"
NODE = HOME / "node"
INSTALL_TIMEOUT = 900.0
CLIENT_TIMEOUT = float(os.environ.get("COMPAT_TIMEOUT", "180"))


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


def install() -> None:
    requirements = HERE / "requirements.txt"
    if not _stamp_ok(PY, requirements):
        if not (PY / "bin" / "python").exists():
            _run([sys.executable, "-m", "venv", "--clear", str(PY)])
        _run([str(PY / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r",
              str(requirements)])
        (PY / ".compat-installed").write_text(_digest(requirements))
    package = HERE / "package.json"
    if not _stamp_ok(NODE, package):
        if shutil.which("npm") is None:
            raise SystemExit("compat: npm is missing (Node 20 or later is needed)")
        NODE.mkdir(parents=True, exist_ok=True)
        shutil.copy(package, NODE / "package.json")
        _run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE)
        (NODE / ".compat-installed").write_text(_digest(package))
    # The Node scripts import the packages installed beside them.
    scripts = NODE / "clients"
    scripts.mkdir(exist_ok=True)
    for script in (HERE / "clients").glob("*.mjs"):
        shutil.copy(script, scripts / script.name)


def versions() -> dict[str, str]:
    found: dict[str, str] = {}
    pip = subprocess.run([str(PY / "bin" / "python"), "-m", "pip", "list", "--format=json"],
                         capture_output=True, text=True, timeout=60, check=False)
    if pip.returncode == 0:
        wanted = {"openai", "openai-agents"}
        for entry in json.loads(pip.stdout):
            if entry["name"].lower() in wanted:
                found[f"pip:{entry['name'].lower()}"] = entry["version"]
    for name in json.loads((HERE / "package.json").read_text())["dependencies"]:
        manifest = NODE / "node_modules" / name / "package.json"
        if manifest.exists():
            found[f"npm:{name}"] = json.loads(manifest.read_text())["version"]
    found["node"] = subprocess.run(["node", "--version"], capture_output=True, text=True,
                                   timeout=30, check=False).stdout.strip()
    return found


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


def clients() -> list[Client]:
    python = str(PY / "bin" / "python")
    scripts = NODE / "clients"
    every = [
        Client("python_sdk", [python, "python_sdk.py"], HERE / "clients"),
        Client("openai_agents", [python, "agents_sdk.py"], HERE / "clients"),
        Client("openai_agents_ws", [python, "agents_ws.py"], HERE / "clients"),
        Client("node_sdk", ["node", "node_sdk.mjs"], scripts),
        Client("ai_sdk", ["node", "ai_sdk.mjs"], scripts),
        Client("codex", [python, "codex_cli.py"], HERE / "clients"),
    ]
    only = {n.strip() for n in os.environ.get("COMPAT_ONLY", "").split(",") if n.strip()}
    return [c for c in every if not only or c.name in only]


def run_client(client: Client, base_url: str) -> tuple[bool, list[str]]:
    env = {**os.environ, "COMPAT_BASE_URL": base_url + "/v1", "COMPAT_MODEL": "sim-model",
           "COMPAT_API_KEY": "compat-key", "PYTHONUNBUFFERED": "1",
           "COMPAT_CODEX": str(NODE / "node_modules" / ".bin" / "codex")}
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


def main() -> int:
    try:
        install()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        print(f"compat: installing the clients failed: {exc}", flush=True)
        return 1
    found = versions()
    print("compat: " + ", ".join(f"{k} {v}" for k, v in found.items()), flush=True)
    stack = Stack()
    stack.start()
    results: list[tuple[str, bool]] = []
    try:
        for client in clients():
            started = time.monotonic()
            passed, details = run_client(client, stack.url)
            took = time.monotonic() - started
            print(f"{'PASS' if passed else 'FAIL'} {client.name} ({took:.1f}s)", flush=True)
            for line in details:
                print(f"    {line}", flush=True)
            results.append((client.name, passed))
    finally:
        stack.stop()
    failed = [name for name, passed in results if not passed]
    print(f"compat: {len(results) - len(failed)} passed, {len(failed)} failed"
          + (f" ({', '.join(failed)}); stack log: {stack.log_path}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
