"""`make deploy-test`: the image built and run as the Kubernetes manifests run it, then the compose
stack up, each checked with the OpenAI SDK.

    python -m reliability.deploytest            # a few minutes; the first run builds the bases

1. Podman, with the settings this host needs (reliability/containers.py), and a base: the
   official Python image when a registry answers, else a Debian bookworm base made with
   mmdebstrap, with Redis and nginx images built on it from deploy/local/ (kept between runs).
2. `make image`'s build of deploy/Dockerfile on that base.
3. One instance and a simulator, each as deploy/k8s/proxy-deployment.yaml runs a pod: read-only
   root, every capability dropped, no-new-privileges, uid:gid 10001:10001, the port on
   127.0.0.1 only: /healthz, a Responses request and a stream, then a stream in flight while
   the container is stopped (SIGTERM): it ends with response.completed and the process exits 0
   within the grace.
4. deploy/docker-compose.yml --profile cpu through podman-compose (two instances, a worker,
   Redis, nginx, two simulators): through nginx a stored stream, its replay (`starting_after`)
   served by the other instance (nginx's access log names the upstream), a background job.

Everything started is removed at the end, also on failure; every wait is bounded.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import openai

from reliability.containers import (
    CACHE,
    DEFAULT_BASE,
    IMAGE,
    ROOT,
    build,
    build_local_base,
    engine_env,
    podman_settings,
    registry_reachable,
    run,
)
from tests.support.conformance import check_stream

PREFIX = "rp-deploytest"
NETWORK = f"{PREFIX}-net"
GRACE = 20  # the instance's --shutdown-grace; the engine's stop timeout is above it
STOP_TIMEOUT = 40
# As proxy-deployment.yaml's securityContext: readOnlyRootFilesystem, capabilities drop ALL,
# allowPrivilegeEscalation false, runAsUser/runAsGroup 10001; and its one volume, an emptyDir on
# /tmp (uploads past 1 MiB spool there). podman's `--read-only` alone would add tmpfs mounts of
# its own (/tmp, /var/tmp, /run) that a pod does not have: off, so only the manifest's is there.
AS_K8S = ["--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp:rw,size=1g",
          "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--user", "10001:10001"]
# Past Starlette's spool size (1 MiB): the upload reaches the disk, i.e. the emptyDir.
SPOOLED_UPLOAD = 3 * 2**20
COMPOSE_TOOLS = CACHE / "tools"


class Deploy:
    """The engine, its environment and what this run started, with a log of every step."""

    def __init__(self) -> None:
        # podman even where docker runs: the compose part is podman-compose's (its container
        # names, labels and `healthcheck run`); `make image` alone takes either.
        if not shutil.which("podman"):
            raise SystemExit("make deploy-test runs podman and podman-compose: apt-get install "
                             "podman runc (docs/operations.md); `make image` also takes docker")
        self.engine = "podman"
        self.env = engine_env(self.engine)
        self.steps: list[tuple[str, float, str]] = []

    def sh(self, *argv: str, timeout: float = 60, check: bool = True) -> str:
        return run([self.engine, *argv], timeout=timeout, env=self.env, check=check).stdout

    def step(self, name: str, action: Callable[[], str]) -> None:
        started = time.monotonic()
        print(f"--- {name}", flush=True)
        detail = action()
        took = time.monotonic() - started
        self.steps.append((name, took, detail))
        print(f"ok  {name} ({took:.1f} s): {detail}", flush=True)

    def wait(self, what: str, probe: Callable[[], bool], timeout: float) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            try:
                if probe():
                    return time.monotonic() - started
            except (httpx.HTTPError, OSError, RuntimeError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{what}: not within {timeout:.0f} s")

    def logs(self, container: str, lines: int = 200) -> str:
        return self.sh("logs", "--tail", str(lines), container, timeout=30, check=False)

    def dump(self, *containers: str) -> None:
        """The last lines of each container's log, for a failed step (before it is removed)."""
        for name in containers:
            out = self.logs(name, 15).strip()
            if out and "no such container" not in out.lower():
                print(f"--- last lines of {name}:\n{out}", flush=True)

    def ip(self, container: str) -> str:
        return self.sh("inspect", "-f",
                       "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                       container).strip()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", timeout=60, max_retries=0)


def events_of(stream: Any) -> list[dict[str, Any]]:
    return [event.to_dict() for event in stream]


# --- 1, 2: bases and the image ------------------------------------------------------------

def images(deploy: Deploy) -> dict[str, str]:
    """BASE_IMAGE / REDIS_IMAGE / NGINX_IMAGE for this host, the local ones built if needed."""
    if registry_reachable():
        chosen = {"BASE_IMAGE": DEFAULT_BASE, "REDIS_IMAGE": "redis:7.2",
                  "NGINX_IMAGE": "nginx:1.27"}
        deploy.step("bases", lambda: "a registry answers: the official images")
        return chosen
    chosen = {"BASE_IMAGE": "localhost/responses-proxy-base:bookworm",
              "REDIS_IMAGE": "localhost/responses-proxy-redis:bookworm",
              "NGINX_IMAGE": "localhost/responses-proxy-nginx:bookworm"}
    deploy.step("local base (no registry reachable)",
                lambda: build_local_base(deploy.engine, deploy.env, chosen["BASE_IMAGE"]))
    for name in ("redis", "nginx"):
        deploy.step(f"local {name} image", partial(_local, deploy, name,
                                                   chosen[f"{name.upper()}_IMAGE"],
                                                   chosen["BASE_IMAGE"]))
    return chosen


def _local(deploy: Deploy, name: str, tag: str, base: str) -> str:
    build(deploy.engine, deploy.env, ROOT / "deploy" / "local" / f"{name}.Dockerfile", tag, base,
          context=ROOT / "deploy" / "local", timeout=300)
    return f"{tag} (deploy/local/{name}.Dockerfile, Debian's package)"


def image(deploy: Deploy, base: str) -> str:
    build(deploy.engine, deploy.env, ROOT / "deploy" / "Dockerfile", IMAGE, base)
    size = deploy.sh("image", "inspect", "-f", "{{.Size}}", IMAGE).strip()
    return f"{IMAGE} on {base}, {int(size) // 2**20} MiB"


# --- 3: one instance as Kubernetes runs it ------------------------------------------------

def single(deploy: Deploy) -> None:
    port = free_port()
    deploy.sh("network", "create", NETWORK)
    deploy.sh("run", "-d", "--name", f"{PREFIX}-sim", "--network", NETWORK, *AS_K8S, IMAGE,
              "simulate", "--host", "0.0.0.0", "--port", "8000", "--token-delay-ms", "10")
    deploy.sh("run", "-d", "--name", f"{PREFIX}-proxy", "--network", NETWORK, *AS_K8S,
              "-p", f"127.0.0.1:{port}:8080", "--stop-timeout", str(STOP_TIMEOUT),
              "-e", f"PROXY_UPSTREAMS=http://{PREFIX}-sim:8000",
              "-e", f"PROXY_SHUTDOWN_GRACE={GRACE}", IMAGE, "serve")
    url = f"http://127.0.0.1:{port}"
    deploy.step("as k8s runs it: started", lambda: _started(deploy, url))
    deploy.step("as k8s runs it: Responses", lambda: _responses(url))
    deploy.step("as k8s runs it: an upload past the spool size", lambda: _upload(url))
    deploy.step("as k8s runs it: SIGTERM drain", lambda: _drain(deploy, url))


def _started(deploy: Deploy, url: str) -> str:
    took = deploy.wait("/healthz", lambda: httpx.get(url + "/healthz", timeout=2).status_code
                       == 200, timeout=60)
    deploy.wait("/readyz", lambda: httpx.get(url + "/readyz", timeout=2).status_code == 200,
                timeout=30)
    proxy = f"{PREFIX}-proxy"
    who = deploy.sh("exec", proxy, "id", "-u").strip() + ":" + deploy.sh(
        "exec", proxy, "id", "-g").strip()
    caps = [line.split()[1] for line in deploy.sh("exec", proxy, "cat", "/proc/1/status")
            .splitlines() if line.startswith(("CapEff", "CapPrm", "CapBnd"))]
    nnp = deploy.sh("exec", proxy, "grep", "NoNewPrivs", "/proc/1/status").split()[1]
    writes = run([deploy.engine, "exec", proxy, "touch", "/app/x"], timeout=30, env=deploy.env,
                 check=False)
    assert who == "10001:10001", who
    assert set(caps) == {"0000000000000000"}, caps
    assert nnp == "1", nnp
    assert writes.returncode != 0 and "Read-only file system" in writes.stdout, writes.stdout
    return (f"/healthz 200 after {took:.1f} s, /readyz 200; uid:gid {who}, no capabilities, "
            f"NoNewPrivs, root fs read-only (touch: {writes.stdout.strip().split(': ')[-1]})")


def _responses(url: str) -> str:
    client = sdk(url)
    answer = client.responses.create(model="sim-model", input="hello from a container")
    assert answer.status == "completed" and answer.output_text == "You said: hello from a " \
        "container", answer
    events = events_of(client.responses.create(model="sim-model", input="[[sim tokens=16]] s",
                                               stream=True))
    check_stream(events)
    assert events[-1]["type"] == "response.completed"
    assert client.responses.retrieve(answer.id).output_text == answer.output_text
    return (f"create {answer.id[:16]}… completed, stream of {len(events)} events ends "
            "response.completed (SDK-validated), retrieve matches")


def _upload(url: str) -> str:
    client = sdk(url)
    data = os.urandom(SPOOLED_UPLOAD)
    made = client.files.create(file=("big.bin", data, "application/octet-stream"),
                               purpose="user_data")
    assert made.bytes == len(data), made
    assert client.files.content(made.id).read() == data
    return f"{len(data) >> 20} MiB uploaded (spooled to /tmp), read back byte for byte"


def _drain(deploy: Deploy, url: str) -> str:
    proxy = f"{PREFIX}-proxy"
    body = {"model": "sim-model", "input": "[[sim delay_ms=100 tokens=40]] drain me",
            "stream": True}
    with httpx.stream("POST", url + "/v1/responses", json=body, timeout=60) as response:
        assert response.status_code == 200, response.read()
        lines = response.iter_lines()
        seen: list[str] = []
        for line in lines:  # up to the first delta: the generation is under way
            seen.append(line)
            if "response.output_text.delta" in line:
                break
        stop_started = time.monotonic()
        stopper = subprocess.Popen([deploy.engine, "stop", "-t", str(STOP_TIMEOUT), proxy],
                                   env=deploy.env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.STDOUT)
        seen.extend(lines)
        stream_ended = time.monotonic() - stop_started
    try:
        stopper.wait(timeout=STOP_TIMEOUT + 20)
    except subprocess.TimeoutExpired:
        stopper.kill()
        raise RuntimeError("the engine's stop did not return") from None
    stopped = time.monotonic() - stop_started
    events = [line[6:] for line in seen if line.startswith("data: ")]
    assert events and '"response.completed"' in events[-1], events[-3:]
    deltas = sum('"response.output_text.delta"' in event for event in events)
    exit_code = deploy.sh("inspect", "-f", "{{.State.ExitCode}}", proxy).strip()
    assert exit_code == "0", f"exit {exit_code}: {deploy.logs(proxy, 20)}"
    assert stopped < GRACE, f"stopped after {stopped:.1f} s, grace {GRACE} s"
    return (f"stop sent after the first delta; the stream went on to all {deltas} deltas and "
            f"response.completed ({stream_ended:.1f} s later); the container exited 0 after "
            f"{stopped:.1f} s (grace {GRACE} s)")


def single_down(deploy: Deploy) -> None:
    for name in (f"{PREFIX}-proxy", f"{PREFIX}-sim"):
        deploy.sh("rm", "-f", "-t", "5", name, timeout=60, check=False)
    deploy.sh("network", "rm", "-f", NETWORK, timeout=60, check=False)


# --- 4: the compose stack -----------------------------------------------------------------

def compose_command(deploy: Deploy) -> list[str]:
    """podman-compose 1.x from PyPI in our cache: Debian bookworm's 1.0.3 has no --profile."""
    tool = COMPOSE_TOOLS / "bin" / "podman-compose"
    if not tool.exists():
        run([sys.executable, "-m", "venv", str(COMPOSE_TOOLS)], timeout=120)
        run([str(COMPOSE_TOOLS / "bin" / "pip"), "install", "--quiet", "podman-compose>=1.4,<2"],
            timeout=300)
    return [str(tool)]


@contextmanager
def compose(deploy: Deploy, chosen: dict[str, str]) -> Iterator[tuple[str, Callable[..., str]]]:
    port = free_port()
    env = {**deploy.env, **chosen, "NGINX_PUBLISH": f"127.0.0.1:{port}"}
    base = [*compose_command(deploy), "-p", PREFIX, "-f", str(ROOT / "deploy" /
                                                              "docker-compose.yml"),
            "--profile", "cpu"]

    def call(*argv: str, timeout: float = 300) -> str:
        return run([*base, *argv], timeout=timeout, env=env).stdout

    try:
        yield f"http://127.0.0.1:{port}", call
    except Exception:
        deploy.dump(*(f"{PREFIX}_{service}_1" for service in ("proxy-1", "proxy-2", "worker",
                                                             "nginx", "redis")))
        raise
    finally:
        started = time.monotonic()
        run([*base, "down", "-v", "-t", "10"], timeout=180, env=env, check=False)
        left = deploy.sh("ps", "-aq", "--filter", f"label=io.podman.compose.project={PREFIX}",
                         check=False).split()
        if left:
            deploy.sh("rm", "-f", "-t", "0", *left, check=False)
        print(f"    compose stack down ({time.monotonic() - started:.1f} s)", flush=True)


def stack(deploy: Deploy, chosen: dict[str, str]) -> None:
    with compose(deploy, chosen) as (url, call):
        deploy.step("compose: build args reach the build",
                    lambda: _compose_build(call, chosen["BASE_IMAGE"]))
        deploy.step("compose: up", lambda: _compose_up(deploy, call, url))
        instances = {deploy.ip(f"{PREFIX}_proxy-{n}_1") + ":8080": f"proxy-{n}" for n in (1, 2)}
        nginx_log = partial(deploy.logs, f"{PREFIX}_nginx_1", 500)
        live: list[dict[str, Any]] = []
        deploy.step("compose: stored stream through nginx",
                    lambda: _stored_stream(url, instances, nginx_log, live))
        deploy.step("compose: replay from the other instance",
                    lambda: _replay(deploy, url, instances, nginx_log, live))
        deploy.step("compose: background job on the worker", lambda: _background(deploy, url))


def _compose_build(call: Callable[..., str], base: str) -> str:
    call("build", "proxy-1", timeout=600)
    return f"`build proxy-1` with BASE_IMAGE={base} (layers cached from the image step)"


def _compose_up(deploy: Deploy, call: Callable[..., str], url: str) -> str:
    call("up", "-d", "--no-build", timeout=180)
    took = deploy.wait("nginx → /healthz", lambda: httpx.get(url + "/healthz", timeout=2)
                       .status_code == 200, timeout=90)
    # Podman runs health checks from systemd timers; without systemd, run each one here.
    checked = ("redis", "proxy-1", "proxy-2")
    for service in checked:
        deploy.wait(f"{service} health check", partial(_healthy, deploy, f"{PREFIX}_{service}_1"),
                    timeout=60)
    deploy.wait("/readyz through nginx", lambda: httpx.get(url + "/readyz", timeout=2)
                .status_code == 200, timeout=60)
    running = deploy.sh("ps", "--filter", f"label=io.podman.compose.project={PREFIX}",
                        "--format", "{{.Names}}").split()
    return (f"{len(running)} containers ({', '.join(n.split('_')[1] for n in running)}); "
            f"/healthz through nginx after {took:.1f} s; health checks pass: "
            f"{', '.join(checked)}")


def _healthy(deploy: Deploy, container: str) -> bool:
    return run([deploy.engine, "healthcheck", "run", container], timeout=30, env=deploy.env,
               check=False).returncode == 0


def _served_by(instances: dict[str, str], nginx_log: Callable[[], str], request_id: str) -> str:
    for _ in range(40):  # a stream's access-log line is written when it ends: bounded
        for line in nginx_log().splitlines():
            if line.endswith(f"request_id={request_id}"):
                upstream = line.split(" upstream=", 1)[1].split(" ", 1)[0]
                return instances[upstream]
        time.sleep(0.25)
    raise RuntimeError(f"{request_id} is not in nginx's access log")


def _stored_stream(url: str, instances: dict[str, str], nginx_log: Callable[[], str],
                   live: list[dict[str, Any]]) -> str:
    events = events_of(sdk(url).responses.create(
        model="sim-model", input="[[sim tokens=12]] stored through nginx", stream=True,
        extra_headers={"x-request-id": "deploytest-stream"}))
    check_stream(events)
    assert events[-1]["type"] == "response.completed"
    live.extend(events)
    served = _served_by(instances, nginx_log, "deploytest-stream")
    response_id = events[0]["response"]["id"]
    stored = sdk(url).responses.retrieve(response_id)
    assert stored.status == "completed"
    return f"{response_id[:16]}… {len(events)} events, served by {served}, stored (retrieve)"


def _replay(deploy: Deploy, url: str, instances: dict[str, str], nginx_log: Callable[[], str],
            live: list[dict[str, Any]]) -> str:
    first = _served_by(instances, nginx_log, "deploytest-stream")
    response_id = live[0]["response"]["id"]
    for attempt in range(1, 5):  # round robin: the other instance within two tries
        request_id = f"deploytest-replay-{attempt}"
        replayed = events_of(sdk(url).responses.retrieve(
            response_id, stream=True, starting_after=3, extra_headers={"x-request-id":
                                                                         request_id}))
        assert replayed == live[4:], "the replay differs from the stream"
        served = _served_by(instances, nginx_log, request_id)
        if served != first:
            own_log = deploy.logs(f"{PREFIX}_{served}_1", 500)
            assert request_id in own_log, f"{request_id} not in {served}'s log"
            return (f"starting_after=3: events 4..{live[-1]['sequence_number']} identical to "
                    f"the live stream, served by {served} (stream was {first}; attempt "
                    f"{attempt}; in nginx's access log and {served}'s own log)")
    raise RuntimeError(f"four replays, all served by {first}")


def _background(deploy: Deploy, url: str) -> str:
    client = sdk(url)
    job = client.responses.create(model="sim-model", input="[[sim tokens=8]] later",
                                  background=True)
    assert job.status in ("queued", "in_progress"), job.status
    took = deploy.wait("the background job", lambda: client.responses.retrieve(job.id).status
                       == "completed", timeout=60)
    final = client.responses.retrieve(job.id)
    assert final.output_text, final
    # The instances run `--no-worker`: only the worker container can have run it.
    return (f"{job.id[:16]}… {job.status} → completed in {took:.1f} s "
            f"({len(final.output_text)} chars of output) on the worker")


# --- the run -------------------------------------------------------------------------------

def main() -> int:
    started = time.monotonic()
    deploy = Deploy()
    print(f"engine: {deploy.engine}; CONTAINERS_CONF={deploy.env.get('CONTAINERS_CONF', '-')}")
    for table, lines in podman_settings().items():
        for line, why in lines:
            print(f"  [{table}] {line}  # {why}")
    failed = None
    single_down(deploy)  # what a killed run may have left
    try:
        chosen = images(deploy)
        deploy.step("image (make image)", lambda: image(deploy, chosen["BASE_IMAGE"]))
        try:
            single(deploy)
        except Exception:
            deploy.dump(f"{PREFIX}-proxy", f"{PREFIX}-sim")
            raise
        finally:
            single_down(deploy)
        stack(deploy, chosen)
    except (AssertionError, RuntimeError, httpx.HTTPError, openai.OpenAIError) as exc:
        failed = exc
        print(f"FAIL: {type(exc).__name__}: {exc}", flush=True)
    print(f"\nsummary ({deploy.engine}, {time.monotonic() - started:.0f} s in all):")
    for name, took, detail in deploy.steps:
        print(f"  {took:6.1f} s  {name}: {detail}")
    print("FAILED" if failed else "PASSED")
    return 1 if failed else 0


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parent.parent)
    sys.exit(main())
