"""Real servers for end-to-end tests: the simulator, the proxy and redis-server, each in its own
process on a free 127.0.0.1 port. Every wait is bounded in count and time."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx

ROOT = Path(__file__).resolve().parents[2]


def wait_for(check: Callable[[], bool], within: float) -> bool:
    """Polls `check` for at most `within` seconds (a bound, not a speed claim); its last answer."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def wait_status(server: ServerProcess, response_id: str, statuses: set[str],
                timeout: float = 20.0, *, headers: Mapping[str, str]) -> dict[str, Any]:
    """The stored response once its status is one of `statuses`, or as it is after `timeout`
    seconds (polled; the caller asserts on what it got)."""
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = httpx.get(f"{server.url}/v1/responses/{response_id}",
                                         headers=dict(headers), timeout=10).json()
        if body["status"] in statuses or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A child process serving HTTP on 127.0.0.1:`port`; `url` is its root."""

    def __init__(self, args: Sequence[str], port: int, *, env: dict[str, str] | None = None,
                 ready_path: str | None = "/healthz", log_name: str = "server",
                 ready_text: str | None = None) -> None:
        self.args = list(args)
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.ready_path = ready_path
        self.ready_text = ready_text  # a process without a port: ready once it logs this
        self._env = {**os.environ, **(env or {})}
        self._log: IO[bytes] = tempfile.NamedTemporaryFile(  # noqa: SIM115 - the server's life
            prefix=f"{log_name}-", suffix=".log", delete=False
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> ServerProcess:
        if self._log.closed:  # started again after a stop: append to the same log
            self._log = open(self._log.name, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.args, stdout=self._log, stderr=subprocess.STDOUT, env=self._env, cwd=ROOT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.args} exited {self.proc.returncode}:\n"
                                       f"{self.output()}")
                if self._ready():
                    return self
                time.sleep(0.05)
        except BaseException:  # Ctrl-C or SIGTERM while waiting: nobody else holds it yet
            self.stop()
            raise
        self.stop()
        raise RuntimeError(f"{self.args} not ready after {timeout}s:\n{self.output()}")

    def _ready(self) -> bool:
        if self.ready_text is not None:
            self._log.flush()
            return self.ready_text in self.output()
        if self.ready_path is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return True
            except OSError:
                return False
        try:
            return httpx.get(self.url + self.ready_path, timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False

    def output(self) -> str:
        return Path(self._log.name).read_text(errors="replace")[-4000:]

    def full_output(self) -> str:
        """Everything the process wrote so far (`output()` is its tail, for error messages)."""
        return Path(self._log.name).read_text(errors="replace")

    def signal(self, sig: int) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()  # the file stays on disk (`output()` reads it by name)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.proc:
            self.proc.wait(5)
        self._log.close()


def proxy_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "proxy", *args]


def start_simulator(*flags: str, port: int | None = None) -> ServerProcess:
    port = port or free_port()
    cmd = proxy_command("simulate", "--port", str(port), *flags)
    return ServerProcess(cmd, port, ready_path="/health", log_name="simulator").start()


def start_proxy(upstream: str | Sequence[str], *flags: str, redis_url: str | None = None,
                port: int | None = None, env: dict[str, str] | None = None) -> ServerProcess:
    port = port or free_port()
    ups = [upstream] if isinstance(upstream, str) else list(upstream)
    cmd = proxy_command("serve", "--port", str(port))
    for url in ups:
        cmd += ["--upstream", url]
    if redis_url:
        cmd += ["--redis-url", redis_url]
    cmd += list(flags)
    return ServerProcess(cmd, port, env=env, log_name="proxy").start()


def start_mcp_server(*flags: str, port: int | None = None) -> ServerProcess:
    """tests/support/mcp_server.py's real MCP server (streamable HTTP at `/mcp`) on loopback."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "tests.support.mcp_server", "--port", str(port), *flags]
    return ServerProcess(cmd, port, ready_path=None, log_name="mcp").start()


def start_searx(port: int | None = None) -> ServerProcess:
    """tests/support/searx.py's fake SearXNG (JSON API at `/search`) on loopback."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "tests.support.searx", "--port", str(port)]
    return ServerProcess(cmd, port, ready_path="/health", log_name="searx").start()


def start_worker(upstream: str, redis_url: str, *flags: str) -> ServerProcess:
    """A `responses-proxy worker` process (no port): ready once it says so in its log."""
    cmd = proxy_command("worker", "--upstream", upstream, "--redis-url", redis_url, *flags)
    return ServerProcess(cmd, 0, ready_path=None, log_name="worker",
                         ready_text="worker running").start()


def start_redis(port: int | None = None, *, flags: Sequence[str] = (),
                workdir: str | None = None) -> ServerProcess:
    """redis-server without persistence; `flags` come last, so `--appendonly yes` (with the
    same `workdir` on a restart) gives a server that comes back with its data."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server is not installed (make test installs it)")
    port = port or free_port()
    workdir = workdir or tempfile.mkdtemp(prefix="redis-")
    cmd = [exe, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
           "--dir", workdir, "--protected-mode", "yes", *flags]
    return ServerProcess(cmd, port, ready_path=None, log_name="redis").start()


# nginx: the config we ship (deploy/nginx/responses-proxy.conf), rendered for loopback ports and
# run as a foreground child with a prefix of its own, so nothing it touches is root-owned.
NGINX_CONF = ROOT / "deploy" / "nginx" / "responses-proxy.conf"
_UPSTREAM_BLOCK = re.compile(r"(upstream responses_proxy \{\n)((?:[ \t]*server [^\n]*;\n)+)")
_LISTEN = re.compile(r"^([ \t]*)listen 80;$", re.MULTILINE)


def render_nginx_config(text: str, *, port: int, upstreams: Sequence[str], log_dir: str,
                        overrides: Mapping[str, str] | None = None) -> str:
    """The shipped config with our listen port, our instances (`host:port`) as the upstream's
    servers and its logs in `log_dir`. `overrides` ({directive: value}) replace or add directives
    of the `location /` block, for tests that show what a setting does. Raises when the shipped
    file no longer has the shape we rewrite."""
    servers = "".join(f"    server {address};\n" for address in upstreams)
    text, n_upstream = _UPSTREAM_BLOCK.subn(lambda m: m.group(1) + servers, text)
    text, n_listen = _LISTEN.subn(rf"\g<1>listen 127.0.0.1:{port};", text)
    if (n_upstream, n_listen) != (1, 1) or "/var/log/nginx/" not in text:
        raise ValueError("deploy/nginx/responses-proxy.conf changed shape: update the renderer")
    text = text.replace("/var/log/nginx/", log_dir.rstrip("/") + "/")
    for directive, value in (overrides or {}).items():
        line = f"        {directive} {value};\n"
        text, replaced = re.subn(rf"^[ \t]*{directive} [^\n]*;\n", line, text, count=1,
                                 flags=re.MULTILINE)
        if not replaced:
            marker = "proxy_pass http://responses_proxy;\n"
            text = text.replace(marker, marker + line)
    return text


def nginx_executable() -> str:
    exe = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK)
                                    else None)
    if exe is None:
        raise RuntimeError("nginx is not installed (make test installs it)")
    return exe


class NginxServer(ServerProcess):
    """nginx with `daemon off;`: its prefix (config, pid, logs, temp files) is `self.prefix`."""

    def __init__(self, args: Sequence[str], port: int, prefix: Path) -> None:
        super().__init__(args, port, ready_path=None, log_name="nginx")
        self.prefix = prefix

    def access_log(self) -> list[str]:
        path = self.prefix / "access.log"
        return path.read_text().splitlines() if path.exists() else []

    def output(self) -> str:
        errors = self.prefix / "error.log"
        return super().output() + (errors.read_text(errors="replace")[-4000:]
                                   if errors.exists() else "")


def start_nginx(upstreams: Sequence[str], *, port: int | None = None,
                overrides: Mapping[str, str] | None = None) -> NginxServer:
    """nginx on 127.0.0.1:`port` in front of `upstreams` (server roots such as
    `http://127.0.0.1:8123`), configured by the shipped file."""
    exe = nginx_executable()
    port = port or free_port()
    prefix = Path(tempfile.mkdtemp(prefix="nginx-"))
    prefix.chmod(0o755)  # started as root, nginx's workers run as nobody and write temp files here
    addresses = [url.split("://", 1)[-1].rstrip("/") for url in upstreams]
    site = render_nginx_config(NGINX_CONF.read_text(), port=port, upstreams=addresses,
                               log_dir=str(prefix), overrides=overrides)
    (prefix / "responses-proxy.conf").write_text(site)
    temp = "\n".join(f"    {name}_temp_path {prefix}/{name};"
                     for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (prefix / "nginx.conf").write_text(
        "daemon off;\nworker_processes 1;\n"
        f"pid {prefix}/nginx.pid;\nerror_log {prefix}/error.log warn;\n"
        "events { worker_connections 1024; }\n"
        f"http {{\n{temp}\n    include {prefix}/responses-proxy.conf;\n}}\n"
    )
    cmd = [exe, "-p", f"{prefix}/", "-c", str(prefix / "nginx.conf"),
           "-e", str(prefix / "error.log")]
    server = NginxServer(cmd, port, prefix)
    server.start()
    return server
