"""deploy/ checked against the code: we cannot run docker or a cluster here,
so every name, port, path and limit the deploy files rely on is compared with what the app
reads, serves and defaults to.

- every `PROXY_*` name in deploy/ is read by `build_settings` and listed in the configuration
  reference (docs/configuration.md);
- ports, probe and health-check paths in compose, Kubernetes and nginx are the app's;
- grace periods exceed `PROXY_SHUTDOWN_GRACE`; body limits equal `PROXY_MAX_BODY_BYTES`;
- every metric in the Grafana dashboard is one of the agreed families, with their labels.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from proxy.app import create_app
from proxy.core.storage.topology import parse_redis_url
from proxy.settings import PLACEHOLDERS, ConfigError, Settings, build_settings
from proxy.web.middleware.bodylimits import MULTIPART_SLACK

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
NGINX = DEPLOY / "nginx" / "responses-proxy.conf"
DASHBOARD = DEPLOY / "grafana" / "responses-proxy.json"
DEFAULTS = Settings()

# The metric families everyone names today, with their labels. The dashboard
# may use only these; `/metrics` is compared for the families a running app already exposes.
METRIC_FAMILIES: dict[str, tuple[str, ...]] = {
    "proxy_requests_total": ("route", "method", "status"),
    "proxy_request_duration_seconds": ("route",),
    "proxy_ttft_seconds": ("route",),
    "proxy_tokens_total": ("direction",),
    "proxy_responses_total": ("status",),
    "proxy_open_streams": ("route",),
    "proxy_upstream_up": ("replica",),
    "proxy_upstream_in_flight": ("replica",),
    "proxy_jobs_queued": (),
    "proxy_event_loop_tasks": (),
    "proxy_jobs_total": ("outcome",),
    "proxy_cache_requests_total": ("route", "result"),
    "proxy_cache_lookup_seconds": (),
    "proxy_store_errors_total": (),
    "proxy_overhead_seconds": ("route",),
    "proxy_rate_limited_total": ("reason",),
}
# What prometheus adds to a family's samples (histograms, and counters' creation time).
SAMPLE_SUFFIXES = ("_bucket", "_sum", "_count", "_created")
# Labels PromQL adds or Prometheus attaches to every scraped series.
QUERY_LABELS = {"le", "instance", "job"}


def family_of(sample: str) -> str:
    for suffix in SAMPLE_SUFFIXES:
        if sample.endswith(suffix) and sample[: -len(suffix)] in METRIC_FAMILIES:
            return sample[: -len(suffix)]
    return sample


def k8s_documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def k8s(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in k8s_documents()
             if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}"
    return found[0]


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def nginx_directives() -> list[str]:
    """The shipped nginx config without comments, one directive per item."""
    lines = [line.split("#", 1)[0].strip() for line in NGINX.read_text().splitlines()]
    return [line for line in lines if line]


class RecordingEnv(dict[str, str]):
    """An empty environment that remembers every name `build_settings` asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.asked.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.asked.add(str(key))
        return super().__contains__(key)


def env_names_in_deploy() -> set[str]:
    names: set[str] = set()
    for path in DEPLOY.rglob("*"):
        if path.is_file():
            names |= set(re.findall(r"\bPROXY_[A-Z][A-Z0-9_]*", path.read_text()))
    return names


def documented_configuration_names() -> set[str]:
    text = (ROOT / "docs" / "configuration.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return set(re.findall(r"\bPROXY_[A-Z][A-Z0-9_]*", "\n".join(rows)))


def test_every_env_name_in_deploy_is_read_by_the_settings_and_documented() -> None:
    used = env_names_in_deploy()
    assert {"PROXY_UPSTREAMS", "PROXY_REDIS_URL", "PROXY_FLEET_SECRET"} <= used
    env = RecordingEnv()
    build_settings({}, env)
    assert used - env.asked == set(), "names in deploy/ that build_settings never reads"
    assert used - documented_configuration_names() == set(), "missing from docs/configuration.md"


def test_a_misspelt_env_name_would_be_caught() -> None:
    # The check above is not vacuous: a name the settings do not read is not "asked".
    env = RecordingEnv()
    build_settings({}, env)
    assert "PROXY_UPSTREAM" not in env.asked
    assert "PROXY_SHUTDOWN_GRACE" in env.asked


def test_compose_env_values_are_valid_settings() -> None:
    services = compose()["services"]
    for name in ("proxy-1", "proxy-2", "worker"):
        env = {k: str(v) for k, v in services[name]["environment"].items()
               if "${" not in str(v)}  # values left to the operator's .env
        settings = build_settings({}, env)
        assert settings.server.host == "0.0.0.0"  # reachable from nginx, not only from inside
        assert settings.store.redis_url == "redis://redis:6379/0"
        assert settings.fleet.upstreams == ("http://replica-1:8000", "http://replica-2:8000")


def test_compose_ports_and_health_checks_match_the_app() -> None:
    services = compose()["services"]
    port = services["proxy-1"]["environment"]["PROXY_PORT"]
    assert int(port) == DEFAULTS.server.port
    for name in ("proxy-1", "proxy-2"):
        check = " ".join(services[name]["healthcheck"]["test"])
        assert f"http://127.0.0.1:{port}/readyz" in check
        assert services[name]["command"] == ["serve", "--no-worker"]
    assert services["worker"]["command"] == ["worker"]
    # nginx sends to the instances' port and publishes its own `listen` port.
    servers = [d for d in nginx_directives() if d.startswith("server proxy-")]
    assert servers == [f"server proxy-1:{port};", f"server proxy-2:{port};"]
    # The published address is a variable (`make deploy-test` keeps it on loopback), 8080 by
    # default.
    assert services["nginx"]["ports"] == ["${NGINX_PUBLISH:-8080}:80"]
    assert "listen 80;" in nginx_directives()
    assert services["nginx"]["volumes"] == [
        "./nginx/responses-proxy.conf:/etc/nginx/conf.d/default.conf:ro"]


def test_compose_profiles_give_both_fleets_the_upstream_names() -> None:
    services = compose()["services"]
    upstream_hosts = {url.split("://")[1].split(":")[0] for url in
                      services["proxy-1"]["environment"]["PROXY_UPSTREAMS"].split(",")}
    for profile, names in (("cpu", ("sim-1", "sim-2")), ("gpu", ("vllm-1", "vllm-2"))):
        aliases = set()
        for name in names:
            assert services[name]["profiles"] == [profile]
            aliases |= set(services[name]["networks"]["default"]["aliases"])
        assert aliases == upstream_hosts
    sim = services["sim-1"]["command"]
    assert sim[:1] == ["simulate"] and sim[sim.index("--port") + 1] == "8000"
    assert sim[sim.index("--host") + 1] == "0.0.0.0"


def test_compose_redis_persists_and_never_evicts() -> None:
    command = " ".join(compose()["services"]["redis"]["command"])
    for setting in ("--appendonly yes", "--appendfsync everysec", "--save 900 1",
                    "--maxmemory-policy noeviction"):
        assert setting in command
    redis_args = " ".join(k8s("StatefulSet", "redis")["spec"]["template"]["spec"]
                          ["containers"][0]["args"])
    for setting in ("--appendonly yes", "--appendfsync everysec", "--maxmemory-policy noeviction"):
        assert setting in redis_args


def test_grace_periods_exceed_the_shutdown_grace() -> None:
    config = k8s("ConfigMap", "responses-proxy")["data"]
    grace = float(config["PROXY_SHUTDOWN_GRACE"])
    for name in ("responses-proxy", "responses-proxy-worker"):
        spec = k8s("Deployment", name)["spec"]["template"]["spec"]
        pre_stop = spec["containers"][0].get("lifecycle", {}).get("preStop", {})
        sleep = float(pre_stop["exec"]["command"][1]) if pre_stop else 0.0
        assert spec["terminationGracePeriodSeconds"] > grace + sleep
    for name in ("proxy-1", "proxy-2", "worker"):
        service = compose()["services"][name]
        assert float(service["stop_grace_period"].rstrip("s")) > float(
            service["environment"]["PROXY_SHUTDOWN_GRACE"])


@pytest.fixture(scope="module")
def app_routes() -> set[tuple[str, str]]:
    app = create_app(Settings.of(upstreams=("http://127.0.0.1:1",)))
    return {(route.path, method) for route in app.routes  # type: ignore[attr-defined]
            # WebSocket routes (web/routes/websocket.py) have no HTTP methods.
            for method in (getattr(route, "methods", None) or ())}


def test_kubernetes_probes_ports_and_services_match_the_app(
        app_routes: set[tuple[str, str]]) -> None:
    config = k8s("ConfigMap", "responses-proxy")["data"]
    assert int(config["PROXY_PORT"]) == DEFAULTS.server.port
    assert config["PROXY_HOST"] == "0.0.0.0"
    build_settings({}, config)  # every value is one the proxy accepts
    container = k8s("Deployment", "responses-proxy")["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["serve", "--no-worker"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": DEFAULTS.server.port}
    probes = {"livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for probe, path in probes.items():
        get = container[probe]["httpGet"]
        assert get["path"] == path and (path, "GET") in app_routes
        assert get["port"] in ports or get["port"] in ports.values()
    service = k8s("Service", "responses-proxy")
    assert service["spec"]["ports"][0]["targetPort"] in ports
    assert service["spec"]["selector"] == k8s("Deployment", "responses-proxy")[
        "spec"]["selector"]["matchLabels"]
    annotations = k8s("Deployment", "responses-proxy")["spec"]["template"]["metadata"][
        "annotations"]
    assert int(annotations["prometheus.io/port"]) == DEFAULTS.server.port
    assert (annotations["prometheus.io/path"], "GET") in app_routes
    assert k8s("Deployment", "responses-proxy-worker")["spec"]["template"]["spec"][
        "containers"][0]["args"] == ["worker"]
    assert k8s("HorizontalPodAutoscaler", "responses-proxy")["spec"]["scaleTargetRef"][
        "name"] == "responses-proxy"
    pdb_selectors = [d["spec"]["selector"]["matchLabels"] for d in k8s_documents()
                     if d["kind"] == "PodDisruptionBudget"]
    assert k8s("Deployment", "responses-proxy")["spec"]["selector"]["matchLabels"] in (
        pdb_selectors)


_QUANTITY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def _bytes(quantity: str) -> int:
    """A Kubernetes quantity in binary units (`512Mi`, `1Gi`) or plain bytes."""
    for suffix, factor in _QUANTITY.items():
        if quantity.endswith(suffix):
            return int(quantity[:-len(suffix)]) * factor
    return int(quantity)


def test_the_api_pods_can_spool_uploads_beside_a_read_only_root() -> None:
    """An upload (`POST /v1/files`) past Starlette's spool size goes to a temporary file; with a
    read-only root file system that needs /tmp mounted writable, with room for every upload one
    process reads at once (`--max-uploads-in-flight`) at the largest size. (Without it every
    upload over 1 MiB failed on Kubernetes.)"""
    from starlette.formparsers import MultiPartParser

    config = k8s("ConfigMap", "responses-proxy")["data"]
    limits = build_settings({}, config).limits
    largest = limits.max_file_bytes
    assert MultiPartParser.spool_max_size < largest  # so uploads do reach the disk
    spec = k8s("Deployment", "responses-proxy")["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    assert "/tmp" in mounts, "a read-only root without a writable /tmp"
    volume = next(v for v in spec["volumes"] if v["name"] == mounts["/tmp"])
    # Every upload the process reads at once, at the largest size and its multipart framing.
    assert _bytes(volume["emptyDir"]["sizeLimit"]) >= limits.max_uploads_in_flight * (
        largest + MULTIPART_SLACK)


def test_every_secret_and_config_value_reaches_the_pods() -> None:
    secret = k8s("Secret", "responses-proxy")["stringData"]
    assert "PROXY_FLEET_SECRET" in secret
    for name in ("responses-proxy", "responses-proxy-worker"):
        env_from = k8s("Deployment", name)["spec"]["template"]["spec"]["containers"][0][
            "envFrom"]
        assert {"configMapRef": {"name": "responses-proxy"}} in env_from
        assert {"secretRef": {"name": "responses-proxy"}} in env_from


def test_kustomization_lists_every_manifest() -> None:
    listed = set(yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())[
        "resources"])
    files = {p.name for p in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == files


def test_body_limits_match_max_body_bytes() -> None:
    limit = DEFAULTS.limits.max_body_bytes
    assert limit == 16 * 1024 * 1024
    assert "client_max_body_size 16m;" in nginx_directives()
    assert f"larger than the limit of {limit} bytes" in NGINX.read_text()
    assert k8s("Ingress", "responses-proxy")["metadata"]["annotations"][
        "nginx.ingress.kubernetes.io/proxy-body-size"] == "16m"
    assert int(k8s("ConfigMap", "responses-proxy")["data"]["PROXY_MAX_BODY_BYTES"]) == limit
    assert int(compose()["services"]["proxy-1"]["environment"]["PROXY_MAX_BODY_BYTES"]) == limit


def test_nginx_config_is_sse_safe() -> None:
    directives = nginx_directives()
    for directive in ("proxy_buffering off;", "proxy_cache off;", "gzip off;",
                      "proxy_http_version 1.1;", "proxy_read_timeout 3600s;",
                      "proxy_set_header Upgrade $http_upgrade;",
                      "proxy_set_header Connection $responses_proxy_connection;",
                      "keepalive 64;", "keepalive_timeout 4s;"):
        assert directive in directives
    # The proxy's `X-Accel-Buffering: no` must stay honoured, and no POST re-sent.
    assert not [d for d in directives if d.startswith("proxy_ignore_headers")]
    assert not [d for d in directives if "non_idempotent" in d]
    # Longer than the pings on a silent stream, so nginx never cuts a live one.
    read_timeout = next(d for d in directives if d.startswith("proxy_read_timeout"))
    assert float(read_timeout.split()[1].rstrip("s;")) > DEFAULTS.streams.ping_interval


def test_dockerfile_builds_a_non_root_serve_image() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("#")]
    # The base is swappable (a mirror, a local base): an ARG before FROM, the official slim
    # Python image by default.
    assert lines[0] == "ARG BASE_IMAGE=python:3.11-slim"
    assert lines[1] == "FROM ${BASE_IMAGE}"
    # A venv first on PATH: Debian's own python3 (a local base) has no `pip` and refuses
    # installs into its system site-packages; python:3.11-slim works the same way.
    assert "PATH=/opt/venv/bin:$PATH" in text
    assert any(line.startswith("RUN python3 -m venv /opt/venv") for line in lines)
    assert "&& pip install ." in text
    # Numeric uid:gid (runAsNonRoot checks it without /etc/passwd), the same as the manifests'.
    user = next(line for line in lines if line.startswith("USER ")).split()[1]
    assert re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", user), user
    uid, gid = user.split(":")
    for name in ("responses-proxy", "responses-proxy-worker"):
        context = k8s("Deployment", name)["spec"]["template"]["spec"]["securityContext"]
        assert context["runAsNonRoot"] is True
        assert (str(context["runAsUser"]), str(context["runAsGroup"])) == (uid, gid), name
    # The user created has that uid, under a name no Debian image already has (`proxy` is
    # uid 13 in every one: useradd failed the build).
    run = " ".join(line for line in lines if not line.startswith(("USER", "ENV", "EXPOSE")))
    created = re.findall(r"useradd [^&]*", run)
    assert len(created) == 1 and f"--uid {uid}" in created[0] and f"--gid {gid}" in created[0]
    assert created[0].split()[-1] not in DEBIAN_USERS
    assert f"groupadd --system --gid {gid} " in run
    assert f"EXPOSE {DEFAULTS.server.port}" in lines
    assert 'ENTRYPOINT ["responses-proxy"]' in lines and 'CMD ["serve"]' in lines
    scripts = (ROOT / "pyproject.toml").read_text()
    assert 'responses-proxy = "proxy.cli:main"' in scripts


# Debian's base-passwd users and groups, present in every Debian-based image.
DEBIAN_USERS = {"root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news",
                "uucp", "proxy", "www-data", "backup", "list", "irc", "gnats", "nobody",
                "_apt", "staff", "users", "nogroup"}


def test_compose_images_and_build_args_are_overridable() -> None:
    """Where no registry is reachable the stack runs on local images: the proxy's base image,
    Redis and nginx each come from a variable with today's image as its default."""
    stacks = [compose(), yaml.safe_load((DEPLOY / "docker-compose.sentinel.yml").read_text())]
    builds = [service["build"] for stack in stacks for service in stack["services"].values()
              if "build" in service]
    assert builds
    for build in builds:
        assert build["dockerfile"] == "deploy/Dockerfile"
        assert build["args"] == {"BASE_IMAGE": "${BASE_IMAGE:-python:3.11-slim}"}
    images = [service["image"] for stack in stacks for service in stack["services"].values()
              if "image" in service]
    redis_images = [image for image in images if "redis:" in image]
    nginx_images = [image for image in images if "nginx:" in image]
    assert redis_images and nginx_images
    assert set(redis_images) == {"${REDIS_IMAGE:-redis:7.2}"}
    assert set(nginx_images) == {"${NGINX_IMAGE:-nginx:1.27}"}


# The keys a compose service may have (the Compose Specification's service properties); a key
# outside it (e.g. `args` beside `build` instead of in it) fails `docker compose` outright.
COMPOSE_SERVICE_KEYS = {
    "annotations", "attach", "blkio_config", "build", "cap_add", "cap_drop", "cgroup",
    "cgroup_parent", "command", "configs", "container_name", "cpu_count", "cpu_percent",
    "cpu_period", "cpu_quota", "cpu_rt_period", "cpu_rt_runtime", "cpu_shares", "cpus",
    "cpuset", "credential_spec", "depends_on", "deploy", "develop", "device_cgroup_rules",
    "devices", "dns", "dns_opt", "dns_search", "domainname", "entrypoint", "env_file",
    "environment", "expose", "extends", "external_links", "extra_hosts", "gpus", "group_add",
    "healthcheck", "hostname", "image", "init", "ipc", "isolation", "labels", "links",
    "logging", "mac_address", "mem_limit", "mem_reservation", "mem_swappiness", "memswap_limit",
    "network_mode", "networks", "oom_kill_disable", "oom_score_adj", "pid", "pids_limit",
    "platform", "ports", "privileged", "profiles", "pull_policy", "read_only", "restart",
    "runtime", "scale", "secrets", "security_opt", "shm_size", "stdin_open", "stop_grace_period",
    "stop_signal", "storage_opt", "sysctls", "tmpfs", "tty", "ulimits", "user", "userns_mode",
    "uts", "volumes", "volumes_from", "working_dir"}


def test_compose_services_use_only_compose_keys() -> None:
    for path in (COMPOSE, DEPLOY / "docker-compose.sentinel.yml"):
        for name, service in yaml.safe_load(path.read_text())["services"].items():
            unknown = set(service) - COMPOSE_SERVICE_KEYS - {"<<"}
            assert not unknown, f"{path.name}: {name} has {sorted(unknown)}"


def test_compose_redis_accepts_the_proxies_without_protected_mode() -> None:
    """A Redis with no password refuses every non-loopback client in protected mode (`DENIED`):
    Debian's redis-server (a local REDIS_IMAGE) has it on, so the compose files turn it off;
    Redis publishes no port, only the compose network reaches it."""
    sentinel = yaml.safe_load((DEPLOY / "docker-compose.sentinel.yml").read_text())
    commands = [compose()["services"]["redis"]["command"],
                sentinel["services"]["redis"]["command"],
                sentinel["services"]["redis-replica"]["command"]]
    for command in commands:
        assert command[0] == "redis-server"
        assert command[command.index("--protected-mode") + 1] == "no"
    assert "protected-mode no" in sentinel["x-sentinel"]["command"][0]
    for stack in (compose(), sentinel):
        assert all("ports" not in service for name, service in stack["services"].items()
                   if name.startswith("redis"))


def dashboard_queries() -> Iterator[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            yield target["expr"]


def test_dashboard_uses_only_the_agreed_metric_families_and_labels() -> None:
    queries = list(dashboard_queries())
    used: set[str] = set()
    for query in queries:
        names = set(re.findall(r"\bproxy_[a-z_]+", query))
        assert names, query
        families = {family_of(name) for name in names}
        assert families <= set(METRIC_FAMILIES), query
        used |= families
        labels: set[str] = set()
        for group in re.findall(r"\bby \(([^)]*)\)", query):
            labels |= {label.strip() for label in group.split(",") if label.strip()}
        for selector in re.findall(r"\{([^}]*)\}", query):
            labels |= set(re.findall(r"([a-z_]+)\s*=~?", selector))
        allowed = QUERY_LABELS.union(*(METRIC_FAMILIES[f] for f in families))
        assert labels <= allowed, query
        for name in names:  # histogram suffixes only on histograms, never on counters
            if name.endswith(("_bucket", "_sum", "_count")):
                assert family_of(name).endswith("_seconds"), name
    assert used == set(METRIC_FAMILIES), "every family has a panel"


def exposed_samples(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


async def test_dashboard_metrics_agree_with_a_running_apps_metrics(
        asgi_client: httpx.AsyncClient) -> None:
    """Every agreed family is declared by the app's /metrics, and after a little traffic the
    samples the dashboard queries carry the names it uses."""
    assert (await asgi_client.post("/v1/responses", json={
        "model": "sim-model", "input": "hi"})).status_code == 200
    assert (await asgi_client.post("/v1/responses", json={
        "model": "sim-model", "input": "hi", "stream": True})).status_code == 200
    assert (await asgi_client.post("/v1/chat/completions", json={
        "model": "sim-model", "messages": [{"role": "user", "content": "hi"}]})).status_code == 200
    text = (await asgi_client.get("/metrics")).text
    samples = exposed_samples(text)
    declared = set(re.findall(r"^# TYPE (proxy_[a-z_]+) ", text, re.M))
    assert set(METRIC_FAMILIES) <= declared, set(METRIC_FAMILIES) - declared
    assert "proxy_requests_total" in samples
    exposed_families = {family_of(sample) for sample in samples}
    for query in dashboard_queries():
        for name in set(re.findall(r"\bproxy_[a-z_]+", query)):
            if family_of(name) in exposed_families:
                assert name in samples or name.endswith("_created"), (name, query)


def test_no_value_shipped_in_deploy_starts_as_a_secret_or_a_key() -> None:
    # No public default secret: the example Secret's placeholders refuse to start, naming the
    # setting ...
    secret = k8s("Secret", "responses-proxy")["stringData"]
    for name in ("PROXY_FLEET_SECRET", "PROXY_API_KEYS"):
        assert secret[name] in PLACEHOLDERS
        with pytest.raises(ConfigError) as info:
            build_settings({}, {name: secret[name]})
        assert name in str(info.value)
    # ... and compose ships no default secret at all (unset: a random one shared in Redis).
    env = compose()["services"]["proxy-1"]["environment"]
    assert env["PROXY_FLEET_SECRET"] == "${PROXY_FLEET_SECRET:-}"
    shipped = "\n".join(p.read_text() for p in DEPLOY.rglob("*") if p.is_file())
    assert {p for p in PLACEHOLDERS if p in shipped} <= set(secret.values())


# -- the Sentinel variants -----------------------------------------------------------------------
SENTINEL_COMPOSE = DEPLOY / "docker-compose.sentinel.yml"
SENTINEL_K8S = DEPLOY / "k8s-sentinel"


def sentinel_config(script: str) -> dict[str, list[str]]:
    """The `sentinel ...` lines a sentinel's start script writes, by directive."""
    lines = [line.strip().split() for line in script.splitlines()]
    return {" ".join(w[1:2]): w[2:] for w in lines if w[:1] == ["sentinel"]}


def check_sentinels_watch(script: str, primary_host: str, lease_ttl: float) -> None:
    config = sentinel_config(script)
    assert config["monitor"] == ["primary", primary_host, "6379", "2"]  # a quorum of 2 of 3
    assert config["resolve-hostnames"] == ["yes"]  # names survive a container's new address
    down_after = int(config["down-after-milliseconds"][1]) / 1000
    assert lease_ttl > down_after  # leases outlive the time a failover takes to start


def test_the_compose_sentinel_variant_points_every_process_at_three_sentinels() -> None:
    base = compose()["services"]
    services = yaml.safe_load(SENTINEL_COMPOSE.read_text())["services"]
    sentinels = sorted(name for name in services if name.startswith("sentinel-"))
    assert sentinels == ["sentinel-1", "sentinel-2", "sentinel-3"]
    for name in ("proxy-1", "proxy-2", "worker"):
        env = {k: str(v) for k, v in {**base[name]["environment"],
                                      **services[name]["environment"]}.items()
               if "${" not in str(v)}
        settings = build_settings({}, env)
        target = parse_redis_url(settings.store.redis_url or "")
        assert (target.kind, target.master) == ("sentinel", "primary")
        assert [host for host, _ in target.hosts] == sentinels
        assert {port for _, port in target.hosts} == {26379}
        check_sentinels_watch(services["sentinel-1"]["command"][0], "redis",
                              settings.store.lease_ttl)
        assert set(services[name]["depends_on"]) == set(sentinels)
    replica = " ".join(services["redis-replica"]["command"])
    assert "--replicaof redis 6379" in replica and "--maxmemory-policy noeviction" in replica


def test_the_kubernetes_sentinel_overlay_points_the_pods_at_the_sentinels() -> None:
    overlay = yaml.safe_load((SENTINEL_K8S / "kustomization.yaml").read_text())
    files = {p.name for p in SENTINEL_K8S.glob("*.yaml")} - {"kustomization.yaml"}
    listed = set(overlay["resources"]) | {p["path"] for p in overlay["patches"]}
    assert listed == files | {"../k8s"}
    patch = yaml.safe_load((SENTINEL_K8S / "configmap-patch.yaml").read_text())
    assert patch["metadata"]["name"] == "responses-proxy"
    env = {**k8s("ConfigMap", "responses-proxy")["data"], **patch["data"]}
    settings = build_settings({}, env)
    target = parse_redis_url(settings.store.redis_url or "")
    docs = [d for d in yaml.safe_load_all((SENTINEL_K8S / "redis-sentinel.yaml").read_text())]
    service = next(d for d in docs if d["kind"] == "Service"
                   and d["metadata"]["name"] == target.hosts[0][0])
    assert service["spec"]["ports"][0]["port"] == target.hosts[0][1] == 26379
    sentinels = next(d for d in docs if d["kind"] == "Deployment")
    assert sentinels["spec"]["replicas"] == 3
    container = sentinels["spec"]["template"]["spec"]["containers"][0]
    check_sentinels_watch(container["args"][0], "redis-0.redis", settings.store.lease_ttl)
    replica = next(d for d in docs if d["kind"] == "StatefulSet")
    args = " ".join(replica["spec"]["template"]["spec"]["containers"][0]["args"])
    assert "--replicaof redis-0.redis 6379" in args
    assert k8s("StatefulSet", "redis")["spec"]["serviceName"] == "redis"  # redis-0.redis exists
