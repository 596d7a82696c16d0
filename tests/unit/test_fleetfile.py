"""`--fleet FILE`: JSON or YAML replicas; every mistake one ConfigError naming flag and field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.services.fleet.fleet import Fleet
from proxy.settings import ConfigError, Timeouts, build_settings
from proxy.settings.fleetfile import ReplicaSpec
from proxy.upstream.client import Upstream

ENTRIES = [
    {"url": "http://10.0.0.5:8000/v1", "weight": 2, "api_key": "sk-five",
     "max_concurrency": 64, "models": ["qwen"], "reasoning_efforts": ["low", "high"]},
    {"url": "http://10.0.0.6:8000"},
]
EXPECTED = (
    ReplicaSpec("http://10.0.0.5:8000", 2.0, "sk-five", 64, ("qwen",),
                reasoning_efforts=("low", "high")),
    ReplicaSpec("http://10.0.0.6:8000"),
)
YAML = """# two replicas
- url: http://10.0.0.5:8000/v1
  weight: 2
  api_key: sk-five
  max_concurrency: 64
  models: [qwen]
  reasoning_efforts: [low, high]
- url: http://10.0.0.6:8000
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_json_file_loads(tmp_path: Path) -> None:
    settings = build_settings({"fleet": write(tmp_path, "f.json", json.dumps(ENTRIES))}, {})
    assert settings.fleet.replicas == EXPECTED
    assert settings.fleet.upstreams == ("http://10.0.0.5:8000", "http://10.0.0.6:8000")


def test_yaml_file_loads_from_the_environment(tmp_path: Path) -> None:
    settings = build_settings({}, {"PROXY_FLEET": write(tmp_path, "f.yaml", YAML)})
    assert settings.fleet.replicas == EXPECTED


def test_a_replicas_object_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, "f.json", json.dumps({"replicas": ENTRIES}))
    assert build_settings({"fleet": path}, {}).fleet.replicas == EXPECTED


@pytest.mark.parametrize(("content", "field"), [
    ([{"url": "ftp://x"}], "replicas[0].url"),
    ([{"url": "http://x", "reasoning_efforts": ["max"]}], "replicas[0].reasoning_efforts"),
    ([{"url": "http://x", "reasoning_efforts": []}], "replicas[0].reasoning_efforts"),
    ([{"weight": 1}], "replicas[0].url"),
    ([{"url": "http://a"}, {"url": "http://b", "weight": 0}], "replicas[1].weight"),
    ([{"url": "http://a", "weight": "heavy"}], "replicas[0].weight"),
    ([{"url": "http://a", "max_concurrency": 1.5}], "replicas[0].max_concurrency"),
    ([{"url": "http://a", "max_concurrency": 0}], "replicas[0].max_concurrency"),
    ([{"url": "http://a", "models": "qwen"}], "replicas[0].models"),
    ([{"url": "http://a", "api_key": ""}], "replicas[0].api_key"),
    ([{"url": "http://a", "wieght": 2}], "replicas[0].wieght"),
    ([{"url": "http://a"}, {"url": "http://a/v1"}], "replicas[1].url"),
    ([{"url": "http://a", "name": "http://a"}], "replicas[0].name"),
    ([{"url": "http://a", "name": ""}], "replicas[0].name"),
    ([{"url": "http://a", "name": "x" * 65}], "replicas[0].name"),
    ([{"url": "http://a", "name": "g"}, {"url": "http://b", "name": "g"}], "replicas[1].name"),
    ([{"url": "http://a"}, {"url": "http://b", "name": "replica-1"}], "replicas[1].name"),
    ([], "non-empty list"),
    ({"url": "http://a"}, "list of replicas"),
])
def test_bad_entries_name_the_flag_and_field(tmp_path: Path, content: object,
                                             field: str) -> None:
    path = write(tmp_path, "f.json", json.dumps(content))
    with pytest.raises(ConfigError) as info:
        build_settings({"fleet": path}, {})
    assert str(info.value).startswith("--fleet") and field in str(info.value)


def test_an_api_key_never_shows_in_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "f.json", json.dumps([{"url": "http://a", "api_key": "sk-secret",
                                                  "weight": -1}]))
    with pytest.raises(ConfigError) as info:
        build_settings({"fleet": path}, {})
    assert "sk-secret" not in str(info.value)


def test_unreadable_or_unparsable_files_are_one_line(tmp_path: Path) -> None:
    for path in (str(tmp_path / "missing.yaml"), write(tmp_path, "bad.yaml", "- url: [\n")):
        with pytest.raises(ConfigError) as info:
            build_settings({"fleet": path}, {})
        assert str(info.value).startswith("--fleet: ") and "\n" not in str(info.value)


def test_fleet_and_upstream_together_is_an_error_naming_both(tmp_path: Path) -> None:
    path = write(tmp_path, "f.yaml", YAML)
    with pytest.raises(ConfigError) as info:
        build_settings({"fleet": path, "upstream": ["http://x:8000"]}, {})
    assert "--fleet" in str(info.value) and "--upstream" in str(info.value)


@pytest.mark.parametrize("value", ["0.5", "nan", "inf", "much"])
def test_affinity_load_factor_is_checked(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_settings({"affinity_load_factor": value}, {})
    assert str(info.value).startswith("--affinity-load-factor")
    assert build_settings({}, {"PROXY_AFFINITY_LOAD_FACTOR": "2"}).fleet.affinity_load_factor == 2.0
    assert build_settings({}, {}).fleet.affinity_load_factor == 1.25


def test_the_cli_exits_with_one_line_for_a_bad_fleet_file(tmp_path: Path) -> None:
    path = write(tmp_path, "f.yaml", "- url: http://a\n  weight: -3\n")
    result = subprocess.run([sys.executable, "-m", "proxy", "serve", "--fleet", path],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0 and "replicas[0].weight" in result.stderr


def test_a_replica_key_replaces_the_fleet_key_for_that_replica_only() -> None:
    from proxy.settings import Timeouts
    from proxy.upstream.client import Upstream
    upstream = Upstream(Upstream.make_pool(), api_key="sk-fleet", timeouts=Timeouts())
    upstream.use_key("http://a:8000", "sk-a")
    head_a = upstream._target("http://a:8000").head
    head_b = upstream._target("http://b:8000").head
    assert b"authorization: Bearer sk-a\r\n" in head_a and b"sk-fleet" not in head_a
    assert b"authorization: Bearer sk-fleet\r\n" in head_b
    assert head_a.startswith(b"host: a:8000\r\n") and head_a.endswith(b"\r\n")


def test_replicas_are_named_by_the_file_or_by_position(tmp_path: Path) -> None:
    """What /metrics labels them with: never their URL."""
    path = write(tmp_path, "f.json", json.dumps([
        {"url": "http://10.0.0.5:8000", "name": "gpu-5"}, {"url": "http://10.0.0.6:8000"}]))
    settings = build_settings({"fleet": path}, {})
    fleet = Fleet(Upstream(Upstream.make_pool(), api_key=None, timeouts=Timeouts()),
                  settings.fleet.upstreams, specs=settings.fleet.replicas)
    assert [r.name for r in fleet.replicas] == ["gpu-5", "replica-2"]
    plain = Fleet(fleet.upstream, ("http://a:1", "http://b:2"))
    assert [r.name for r in plain.replicas] == ["replica-1", "replica-2"]
