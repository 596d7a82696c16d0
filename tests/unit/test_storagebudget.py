"""Where each key's storage budget comes from (core/policy/storagebudget.py): its keys-file entry,
the file's defaults, then `--max-stored-bytes-per-key` (1 GiB unless given; 0: no limit), which
also covers `--api-key` keys and the anonymous tenant of a proxy without keys."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from proxy.core.policy.keysfile import Limits, parse_keys_file
from proxy.core.policy.storagebudget import (
    DEFAULT_MAX_STORED_BYTES,
    StorageBudget,
    storage_budget,
    storage_exceeded,
)
from proxy.core.policy.tenancy import PUBLIC_TENANT, tenant_of
from proxy.settings import ConfigError, build_settings


def test_without_keys_every_tenant_gets_the_proxy_wide_default() -> None:
    budget = storage_budget(None, ())
    assert budget.of(PUBLIC_TENANT) == DEFAULT_MAX_STORED_BYTES == 1 << 30
    assert budget.of(tenant_of("sk-anything")) == DEFAULT_MAX_STORED_BYTES
    assert storage_budget(None, ("sk-ops",), 0).of(tenant_of("sk-ops")) == 0  # 0: no limit


def test_a_keys_own_value_then_the_files_defaults_then_the_flag() -> None:
    doc = {"defaults": {"max_stored_bytes": 5000},
           "keys": [{"key": "sk-own", "max_stored_bytes": 100},
                    {"key": "sk-unlimited", "max_stored_bytes": 0},
                    {"key": "sk-plain", "rpm": 5}]}
    budget = storage_budget(parse_keys_file(doc), ("sk-ops",), 7)
    assert budget.of(tenant_of("sk-own")) == 100
    assert budget.of(tenant_of("sk-unlimited")) == 0
    assert budget.of(tenant_of("sk-plain")) == 5000
    assert budget.of(tenant_of("sk-ops")) == 5000  # `--api-key` keys take the file's defaults
    without_defaults = storage_budget(parse_keys_file({"keys": [{"key": "sk-plain"}]}), (), 7)
    assert without_defaults.of(tenant_of("sk-plain")) == 7


def test_a_storage_budget_alone_makes_no_key_rate_limited() -> None:
    # The limiter runs a script per request for keys with limits: not for this one.
    assert not Limits(max_stored_bytes=10).any
    assert Limits(rpm=1, max_stored_bytes=10).any


def test_the_refusal_is_insufficient_quota_naming_the_budget() -> None:
    refused = storage_exceeded(6000, 6100)
    assert (refused.status, refused.code, refused.type) == (429, "insufficient_quota",
                                                            "insufficient_quota")
    assert "storage budget (6000 bytes; 6100 bytes stored)" in refused.message
    assert refused.headers["x-should-retry"] == "false"
    assert StorageBudget(3, {"t": 4}).of("t") == 4


def test_the_flag_and_its_variable(tmp_path: Path) -> None:
    assert build_settings({}, {}).tenancy.max_stored_bytes_per_key == 1 << 30
    unbounded = build_settings({"max_stored_bytes_per_key": "0"}, {})
    assert unbounded.tenancy.max_stored_bytes_per_key == 0
    env = {"PROXY_MAX_STORED_BYTES_PER_KEY": "2048"}
    assert build_settings({}, env).tenancy.max_stored_bytes_per_key == 2048
    for bad in ("-1", "1GiB", "1.5", "²"):
        with pytest.raises(ConfigError) as info:
            build_settings({"max_stored_bytes_per_key": bad}, {})
        assert info.value.flag == "--max-stored-bytes-per-key"
    path = tmp_path / "keys.json"
    path.write_bytes(orjson.dumps({"keys": [{"key": "sk-a", "max_stored_bytes": 0}]}))
    assert build_settings({"keys_file": str(path)}, {}).tenancy.keys_file is not None
