"""The container engine for `make image` and `make deploy-test`: docker or podman, whichever runs,
the podman settings this host needs, and a local base image where no registry is reachable.

    python3 -m reliability.containers image [--base IMAGE] [--tag TAG]   # `make image`
    python3 -m reliability.containers settings                           # what podman needs here

Standard library only: `make image` runs it with the system's python3, before any venv exists.

Podman's defaults assume a host that can raise its own limits and a cgroup layout crun knows.
Where one is not so (a VM or a container without CAP_SYS_RESOURCE, a hybrid cgroup v1/v2 tree,
no systemd), every `podman run` and every RUN step of a build fails. `podman_settings` reads
those facts from /proc and writes the few lines that fix them into a containers.conf of our
own, passed as CONTAINERS_CONF to every podman we start; /etc is never touched, and a
CONTAINERS_CONF the caller set wins.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "responses-proxy-deploy"
IMAGE = "responses-proxy:local"
DEFAULT_BASE = "python:3.11-slim"
LOCAL_BASE = "localhost/responses-proxy-base:bookworm"
# The local base: Debian's python3 (3.11 on bookworm) with its venv module, and the CAs.
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# What podman asks of the kernel for a rootful container when nothing says otherwise.
PODMAN_DEFAULT_NOFILE = 1048576
# Podman lowers its own RLIMIT_NPROC to this at start (seen in /proc/<podman>/limits), and a
# process cannot raise a hard limit without CAP_SYS_RESOURCE: the most a container can get.
PODMAN_OWN_NPROC = 32768
CAP_SYS_RESOURCE = 24


def run(argv: list[str], timeout: float, env: dict[str, str] | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    """One command, bounded: killed at `timeout` seconds; stdout and stderr kept together."""
    try:
        done = subprocess.run(argv, env=env, timeout=timeout, text=True, check=False,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{' '.join(argv[:4])}… still running after {timeout:.0f} s") from exc
    if check and done.returncode != 0:
        tail = "\n".join(done.stdout.strip().splitlines()[-15:])
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{tail}")
    return done


def engine() -> str:
    """`docker` when its daemon answers (`docker info`), else `podman` when installed."""
    if shutil.which("docker"):
        try:
            if run(["docker", "info"], timeout=20, check=False).returncode == 0:
                return "docker"
        except RuntimeError:
            pass  # a client whose daemon hangs: not an engine
    if shutil.which("podman"):
        return "podman"
    raise SystemExit("no container engine: `docker info` fails and podman is not installed "
                     "(Debian/Ubuntu: apt-get install podman runc)")


@dataclass(frozen=True)
class HostFacts:
    """What podman's defaults depend on, read from /proc (`read`) or given (tests)."""

    mounts: list[tuple[str, str]]  # (mount point, filesystem type)
    hard_nofile: int
    hard_nproc: int
    cap_sys_resource: bool
    systemd: bool

    @classmethod
    def read(cls) -> HostFacts:
        lines = Path("/proc/mounts").read_text().splitlines()
        limits = Path("/proc/self/limits").read_text()
        status = Path("/proc/self/status").read_text()
        return cls(mounts=[(f[1], f[2]) for f in (line.split() for line in lines)],
                   hard_nofile=_hard_limit(limits, "Max open files"),
                   hard_nproc=_hard_limit(limits, "Max processes"),
                   cap_sys_resource=_has_cap(status, CAP_SYS_RESOURCE),
                   systemd=Path("/run/systemd/system").exists())


def _hard_limit(limits: str, name: str) -> int:
    for line in limits.splitlines():
        if line.startswith(name):
            value = line[len(name):].split()[1]
            return sys.maxsize if value == "unlimited" else int(value)
    return sys.maxsize


def _has_cap(status: str, bit: int) -> bool:
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False


def podman_settings(facts: HostFacts | None = None) -> dict[str, list[tuple[str, str]]]:
    """containers.conf lines per table, each with why this host needs it ({} when none)."""
    facts = facts or HostFacts.read()
    tables: dict[str, list[tuple[str, str]]] = {}
    kinds = {kind for _, kind in facts.mounts}
    if ("/sys/fs/cgroup", "cgroup2") not in facts.mounts and {"cgroup", "cgroup2"} <= kinds:
        tables.setdefault("engine", []).append((
            'runtime = "runc"',
            "hybrid cgroups (v1 controllers plus a v2 tree): crun refuses to start a container "
            "(`cgroups in hybrid mode not supported`)"))
    if not facts.systemd:
        tables.setdefault("engine", []).extend([
            ('cgroup_manager = "cgroupfs"', "no systemd to ask for cgroups"),
            ('events_logger = "file"', "no journald"),
        ])
    if not facts.cap_sys_resource:
        nofile = min(facts.hard_nofile, PODMAN_DEFAULT_NOFILE)
        nproc = min(facts.hard_nproc, PODMAN_OWN_NPROC)
        tables.setdefault("containers", []).append((
            f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]',
            "no CAP_SYS_RESOURCE: podman's default limits (1048576) are above this host's hard "
            "limits and the runtime's setrlimit fails (`operation not permitted`)"))
    return tables


def podman_env() -> dict[str, str]:
    """The environment for every podman (and podman-compose) call: CONTAINERS_CONF pointing at
    the settings this host needs, unless the caller chose a containers.conf already."""
    env = dict(os.environ)
    tables = podman_settings()
    if "CONTAINERS_CONF" in env or not tables:
        return env
    CACHE.mkdir(parents=True, exist_ok=True)
    text = ["# Written by reliability/containers.py for this host; see `settings`."]
    for table, lines in tables.items():
        text.append(f"[{table}]")
        for line, why in lines:
            text += [f"# {why}", line]
    conf = CACHE / "containers.conf"
    conf.write_text("\n".join(text) + "\n")
    env["CONTAINERS_CONF"] = str(conf)
    return env


def engine_env(name: str) -> dict[str, str]:
    return podman_env() if name == "podman" else dict(os.environ)


def registry_reachable(timeout: float = 5.0) -> bool:
    """Docker Hub's registry answers (401 to an anonymous /v2/ is an answer)."""
    try:
        urllib.request.urlopen("https://registry-1.docker.io/v2/", timeout=timeout)
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def image_exists(name: str, tag: str, env: dict[str, str]) -> bool:
    return run([name, "image", "inspect", tag], timeout=30, env=env, check=False).returncode == 0


def build_local_base(name: str, env: dict[str, str], tag: str = LOCAL_BASE) -> str:
    """A Debian bookworm base (mmdebstrap, minbase) imported as `tag`; kept once made. The
    host's own CAs (/usr/local/share/ca-certificates) go in too: where PyPI is reached through
    a TLS-inspecting egress proxy, pip in the build trusts what the host trusts."""
    if image_exists(name, tag, env):
        return f"{tag} (cached)"
    if not shutil.which("mmdebstrap"):
        raise SystemExit("no registry reachable and no mmdebstrap to make a local base "
                         "(apt-get install mmdebstrap)")
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / "base-bookworm.tar"
    hooks = ['chroot "$1" update-ca-certificates']
    if Path("/usr/local/share/ca-certificates").is_dir():
        hooks.insert(0, "copy-in /usr/local/share/ca-certificates /usr/local/share")
    argv = ["mmdebstrap", "--quiet", "--variant=minbase", f"--include={BASE_PACKAGES}"]
    argv += [f"--customize-hook={hook}" for hook in hooks]
    run([*argv, "bookworm", str(tarball), DEBIAN_MIRROR], timeout=600)
    run([name, "import", str(tarball), tag], timeout=300, env=env)
    tarball.unlink()
    return f"{tag} (mmdebstrap bookworm minbase, imported)"


def build(name: str, env: dict[str, str], dockerfile: Path, tag: str, base: str,
          context: Path = ROOT, timeout: float = 600) -> None:
    run([name, "build", "-f", str(dockerfile), "--build-arg", f"BASE_IMAGE={base}",
         "-t", tag, str(context)], timeout=timeout, env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m reliability.containers")
    sub = parser.add_subparsers(dest="command", required=True)
    image = sub.add_parser("image", help="build deploy/Dockerfile")
    image.add_argument("--base", default=DEFAULT_BASE, help="BASE_IMAGE build argument")
    image.add_argument("--tag", default=IMAGE)
    sub.add_parser("settings", help="the containers.conf lines podman needs on this host")
    args = parser.parse_args(argv)
    if args.command == "settings":
        for table, lines in podman_settings().items():
            print(f"[{table}]")
            for line, why in lines:
                print(f"{line}    # {why}")
        return 0
    name = engine()
    started = time.monotonic()
    print(f"{name} build -f deploy/Dockerfile --build-arg BASE_IMAGE={args.base} -t {args.tag}")
    try:
        build(name, engine_env(name), ROOT / "deploy" / "Dockerfile", args.tag, args.base)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"built {args.tag} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
