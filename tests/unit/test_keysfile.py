"""`--keys-file`: the contract's format in JSON and YAML, defaults merged, and every bad field a
one-line ConfigError naming the flag and the field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from proxy.core.policy.keysfile import KeysFileError, Limits, parse_keys_file
from proxy.settings import ConfigError, accepted_keys, build_settings

DOC = {
    "defaults": {"rpm": 60, "tpm": 10000},
    "keys": [
        {"key": "sk-team-a", "name": "team-a", "max_streams": 4, "token_budget": 1000000},
        {"key": "sk-team-b", "name": "team-b", "rpm": 5},
    ],
}

YAML_DOC = """\
defaults:
  rpm: 60
  tpm: 10000
keys:
  - key: sk-team-a
    name: team-a
    max_streams: 4
    token_budget: 1000000
  - key: sk-team-b
    name: team-b
    rpm: 5
"""


def _expect_parsed(settings_keys: object) -> None:
    keys_file = settings_keys
    assert keys_file is not None
    a, b = keys_file.keys  # type: ignore[attr-defined]
    assert (a.key, a.name, a.limits) == ("sk-team-a", "team-a",
                                         Limits(rpm=60, tpm=10000, max_streams=4,
                                                token_budget=1000000))
    assert (b.key, b.name, b.limits) == ("sk-team-b", "team-b", Limits(rpm=5, tpm=10000))


def test_json_file_from_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_bytes(orjson.dumps(DOC))
    settings = build_settings({"keys_file": str(path)}, {})
    _expect_parsed(settings.tenancy.keys_file)
    assert accepted_keys(settings) == ("sk-team-a", "sk-team-b")


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_yaml_file_from_the_environment(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / ("keys" + suffix)
    path.write_text(YAML_DOC)
    settings = build_settings({}, {"PROXY_KEYS_FILE": str(path)})
    _expect_parsed(settings.tenancy.keys_file)


def test_api_keys_and_file_keys_are_all_accepted(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_bytes(orjson.dumps(DOC))
    settings = build_settings({"keys_file": str(path), "api_key": ["sk-ops"]}, {})
    assert accepted_keys(settings) == ("sk-ops", "sk-team-a", "sk-team-b")


def test_a_key_never_shows_in_the_settings_repr(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_bytes(orjson.dumps(DOC))
    assert "sk-team-a" not in repr(build_settings({"keys_file": str(path)}, {}))


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ([], "(top level)"),
        ({"defaults": {"rpm": 0}}, "defaults.rpm"),
        ({"defaults": {"rmp": 5}}, "defaults.rmp"),
        ({"defaults": []}, "defaults"),
        ({"keys": {}}, "keys"),
        ({"limits": {}}, "limits"),
        ({"keys": ["sk-x"]}, "keys[0]"),
        ({"keys": [{"name": "a"}]}, "keys[0].key"),
        ({"keys": [{"key": "sk a"}]}, "keys[0].key"),
        ({"keys": [{"key": "sk-a", "name": ""}]}, "keys[0].name"),
        ({"keys": [{"key": "sk-a", "tpm": -5}]}, "keys[0].tpm"),
        ({"keys": [{"key": "sk-a", "max_streams": 1.5}]}, "keys[0].max_streams"),
        ({"keys": [{"key": "sk-a", "token_budget": "100"}]}, "keys[0].token_budget"),
        ({"keys": [{"key": "sk-a", "rpm": True}]}, "keys[0].rpm"),
        ({"keys": [{"key": "sk-a", "budget": 5}]}, "keys[0].budget"),
        ({"keys": [{"key": "sk-a", "max_stored_bytes": -1}]}, "keys[0].max_stored_bytes"),
        ({"defaults": {"max_stored_bytes": "1GiB"}}, "defaults.max_stored_bytes"),
        ({"keys": [{"key": "sk-a"}, {"key": "sk-a"}]}, "keys[1].key"),
        ({"keys": [{"key": "sk-a", "name": "x"}, {"key": "sk-b", "name": "x"}]},
         "keys[1].name"),
        ({"keys": [{"key": "sk-a", "priority": "yes"}]}, "keys[0].priority"),
        ({"defaults": {"priority": True}}, "defaults.priority"),  # granted per key only
    ],
)
def test_every_bad_field_is_named(tmp_path: Path, doc: object, field: str) -> None:
    with pytest.raises(KeysFileError) as parsed:
        parse_keys_file(doc)
    assert parsed.value.where == field
    path = tmp_path / "keys.json"
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(ConfigError) as built:
        build_settings({"keys_file": str(path)}, {})
    message = str(built.value)
    assert built.value.flag == "--keys-file"
    assert message.startswith(f"--keys-file: {field}: ")
    assert "\n" not in message
    assert "sk-" not in message  # a key never lands in an error message


def test_a_bad_field_in_yaml_is_named(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text("keys:\n  - key: sk-a\n    rpm: lots\n")
    with pytest.raises(ConfigError, match=r"^--keys-file: keys\[0\]\.rpm: must be a positive"):
        build_settings({"keys_file": str(path)}, {})


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("keys.json", "{not json", "not valid JSON"),
        ("keys.yaml", "keys: [unclosed", "not valid YAML"),
    ],
)
def test_unparsable_files_are_one_line(tmp_path: Path, name: str, text: str, says: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        build_settings({"keys_file": str(path)}, {})
    assert info.value.flag == "--keys-file"
    assert says in str(info.value)
    assert "\n" not in str(info.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--keys-file: cannot read"):
        build_settings({"keys_file": str(tmp_path / "nope.json")}, {})


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("keys.json", '{"keys": [{"key": "sk-a", "rpm": 0}]}', "keys[0].rpm"),
        ("keys.yml", "defaults:\n  tpm: -1\n", "defaults.tpm"),
    ],
)
def test_the_cli_exits_with_one_line_naming_the_field(tmp_path: Path, name: str, text: str,
                                                      says: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    done = subprocess.run([sys.executable, "-m", "proxy", "serve", "--upstream",
                           "http://127.0.0.1:1", "--keys-file", str(path)],
                          capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"responses-proxy: error: --keys-file: {says}: ")


def test_priority_is_granted_per_key() -> None:
    parsed = parse_keys_file({"keys": [{"key": "sk-vip", "priority": True, "rpm": 5},
                                       {"key": "sk-other"}]})
    assert [entry.priority for entry in parsed.keys] == [True, False]
    assert parsed.keys[0].limits == Limits(rpm=5)


def test_cache_group_is_read_and_optional() -> None:
    parsed = parse_keys_file({"keys": [{"key": "sk-a", "cache_group": " team "},
                                       {"key": "sk-b"}]})
    assert [e.cache_group for e in parsed.keys] == ["team", None]


@pytest.mark.parametrize("value", ["", "  ", 3, ["team"]])
def test_a_bad_cache_group_names_the_field(value: object) -> None:
    with pytest.raises(KeysFileError) as info:
        parse_keys_file({"keys": [{"key": "sk-a", "cache_group": value}]})
    assert info.value.where == "keys[0].cache_group"
