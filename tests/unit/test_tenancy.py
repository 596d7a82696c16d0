"""core/policy/tenancy.py: each tenant's prefix-cache salt. Different keys never share one; the
keys of one keys-file `cache_group` do; a client's own `cache_salt` partitions within its key and
can never land on another key's salt."""

from __future__ import annotations

import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.policy.keysfile import parse_keys_file
from proxy.core.policy.tenancy import PUBLIC_TENANT, CacheSalts, tenant_of

A, B, C = tenant_of("sk-a"), tenant_of("sk-b"), tenant_of("sk-c")


def test_each_tenant_has_its_own_stable_salt() -> None:
    salts = CacheSalts()
    assert salts.salt(A) == CacheSalts().salt(A)  # the same on every instance, no secret
    assert len({salts.salt(A), salts.salt(B), salts.salt(PUBLIC_TENANT)}) == 3
    assert len(salts.salt(A)) == 43  # 256 bits in URL-safe base64, as vLLM suggests
    assert A not in salts.salt(A)


def test_keys_of_one_cache_group_share_a_salt_and_no_one_else_does() -> None:
    keys = parse_keys_file({"keys": [
        {"key": "sk-a", "cache_group": "team"}, {"key": "sk-b", "cache_group": "team"},
        {"key": "sk-c"}]})
    salts = CacheSalts.of(keys)
    assert salts.salt(A) == salts.salt(B)
    assert salts.salt(C) not in (salts.salt(A), CacheSalts().salt(A))
    assert salts.salt(C) == CacheSalts().salt(C)
    assert CacheSalts.of(None).salt(A) == CacheSalts().salt(A)


def test_a_body_gets_the_tenants_salt() -> None:
    salts = CacheSalts()
    body = {"model": "m", "messages": []}
    salted = salts.salted(A, body)
    assert salted["cache_salt"] == salts.salt(A)
    assert "cache_salt" not in body  # the caller's dict is left alone


def test_a_client_salt_is_combined_never_used_alone() -> None:
    salts = CacheSalts()
    victim = salts.salt(A)
    mine = salts.salted(B, {"cache_salt": "x"})["cache_salt"]
    assert mine not in ("x", salts.salt(B))
    # Sending the other key's salt (were it known) does not reach its partition.
    assert salts.salted(B, {"cache_salt": victim})["cache_salt"] != victim
    assert salts.salted(A, {"cache_salt": "x"})["cache_salt"] != mine  # still per key
    assert salts.salted(B, {"cache_salt": "x"})["cache_salt"] == mine  # stable: hits again


@pytest.mark.parametrize("value", ["", 5, ["a"], True])
def test_a_client_salt_that_is_not_a_string_is_a_400_naming_it(value: object) -> None:
    with pytest.raises(InvalidRequest) as info:
        CacheSalts().salted(A, {"cache_salt": value})
    assert info.value.param == "cache_salt"


def test_a_salt_is_made_once_per_tenant_and_again_when_the_keys_change(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.core.policy import tenancy

    made: list[tuple[str, ...]] = []
    digest = tenancy._digest

    def counted(*parts: str) -> str:
        made.append(parts)
        return digest(*parts)

    monkeypatch.setattr(tenancy, "_digest", counted)
    salts = CacheSalts()
    alone = salts.salt(A)
    assert [salts.salt(A) for _ in range(3)] == [alone] * 3 and len(made) == 1
    salts.set_groups({A: "team", B: "team"})  # A joins a group: its salt is the group's
    assert salts.salt(A) == salts.salt(B) != alone
    salts.set_groups({})
    assert salts.salt(A) == alone


def test_the_remembered_salts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.core.policy import tenancy

    monkeypatch.setattr(tenancy, "MAX_REMEMBERED", 8)
    salts = CacheSalts()
    for n in range(50):
        assert salts.salt(f"t{n}") == CacheSalts().salt(f"t{n}")
        assert len(salts._made) <= 8
