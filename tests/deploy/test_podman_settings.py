"""The podman settings `make image` / `make deploy-test` write for a host
(reliability/containers.py): each only where the host's facts make podman's default fail."""

from __future__ import annotations

from dataclasses import replace

from reliability.containers import HostFacts, podman_settings

HYBRID = [("/sys/fs/cgroup", "tmpfs"), ("/sys/fs/cgroup/cpu", "cgroup"),
          ("/sys/fs/cgroup/memory", "cgroup"), ("/sys/fs/cgroup/unified", "cgroup2")]
UNIFIED = [("/sys/fs/cgroup", "cgroup2")]
LEGACY = [("/sys/fs/cgroup", "tmpfs"), ("/sys/fs/cgroup/cpu", "cgroup")]


def lines(facts: HostFacts) -> list[str]:
    return [line for table in podman_settings(facts).values() for line, _ in table]


def test_a_systemd_cgroup_v2_host_that_can_raise_limits_needs_nothing() -> None:
    facts = HostFacts(UNIFIED, hard_nofile=524288, hard_nproc=2**22, cap_sys_resource=True,
                      systemd=True)
    assert podman_settings(facts) == {}


def test_a_vm_without_systemd_or_cap_sys_resource_on_hybrid_cgroups() -> None:
    # This project's machine: crun refuses hybrid cgroups; no systemd; limits it cannot raise.
    facts = HostFacts(HYBRID, hard_nofile=20000, hard_nproc=96364, cap_sys_resource=False,
                      systemd=False)
    settings = podman_settings(facts)
    assert settings["engine"] == [
        ('runtime = "runc"', settings["engine"][0][1]),
        ('cgroup_manager = "cgroupfs"', "no systemd to ask for cgroups"),
        ('events_logger = "file"', "no journald"),
    ]
    assert "hybrid" in settings["engine"][0][1]
    # The hard limit where it is below podman's 1048576; NPROC never above podman's own 32768.
    assert [line for line, _ in settings["containers"]] == [
        'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]']


def test_each_fact_brings_only_its_own_setting() -> None:
    able = HostFacts(UNIFIED, hard_nofile=4096, hard_nproc=1000, cap_sys_resource=True,
                     systemd=True)
    assert lines(replace(able, mounts=HYBRID)) == ['runtime = "runc"']
    assert lines(replace(able, mounts=LEGACY)) == []  # cgroup v1 alone: crun runs there
    assert lines(replace(able, cap_sys_resource=False)) == [
        'default_ulimits = ["nofile=4096:4096", "nproc=1000:1000"]']
