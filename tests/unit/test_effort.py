"""`reasoning.effort` mapped to the nearest value a model's vLLM takes (core/translate/effort.py)
and the table the fleet gives for a model (the fleet file's `reasoning_efforts` over the
model's default)."""

from __future__ import annotations

import pytest

from proxy.core.translate import effort
from proxy.core.translate.effort import fit_effort, model_efforts, nearest
from proxy.services.fleet.fleet import Fleet
from proxy.settings.fleetfile import ReplicaSpec


@pytest.mark.parametrize(("asked", "sent"), [
    ("none", "low"), ("minimal", "low"), ("low", "low"), ("medium", "medium"),
    ("high", "high"), ("xhigh", "high"),
])
def test_gpt_oss_takes_the_nearest_of_low_medium_high(asked: str, sent: str) -> None:
    chat = {"model": "openai/gpt-oss-120b", "reasoning_effort": asked}
    assert fit_effort(chat, model_efforts("openai/gpt-oss-120b"))["reasoning_effort"] == sent


def test_a_model_the_table_does_not_know_gets_the_effort_as_is() -> None:
    assert model_efforts("Qwen/Qwen3-8B") is None
    assert fit_effort({"reasoning_effort": "xhigh"}, None) == {"reasoning_effort": "xhigh"}
    assert fit_effort({"model": "m"}, ("low",)) == {"model": "m"}  # no effort: none added


def test_a_tie_goes_to_the_higher_effort() -> None:
    assert nearest("medium", ("low", "high")) == "high"
    assert nearest("none", ("minimal", "xhigh")) == "minimal"


async def test_the_fleet_file_overrides_the_models_table_for_its_replicas() -> None:
    specs = [ReplicaSpec("http://a", models=("gpt-oss-20b",),
                         reasoning_efforts=("minimal", "low", "medium", "high")),
             ReplicaSpec("http://b", models=("gpt-oss-20b", "qwen"),
                         reasoning_efforts=("low", "medium", "high", "xhigh")),
             ReplicaSpec("http://c", models=("gpt-oss-120b", "other"))]
    fleet = Fleet(None, (), specs=specs)  # type: ignore[arg-type]
    # Both may serve it (and a retry may go to either): what both take.
    assert fleet.efforts("gpt-oss-20b") == ("low", "medium", "high")
    assert fleet.efforts("qwen") == ("low", "medium", "high", "xhigh")
    assert fleet.efforts("gpt-oss-120b") == ("low", "medium", "high")  # the default table
    assert fleet.efforts("other") is None  # as is
    assert fleet.efforts("gpt-oss-unlisted") == ("low", "medium", "high")


# -- the replica's vLLM version (its /version) ---------------------------------------------------
@pytest.mark.parametrize(("version", "limit"), [
    ("0.10.1", ("low", "medium", "high")), ("0.10", ("low", "medium", "high")),
    ("0.9.2", ("low", "medium", "high")), ("0.10.2rc1", ("low", "medium", "high")),
    ("0.11.0", None), ("0.16.1+cu128", None), ("1.0.0", None),
    ("0.0.0+simulator", None), ("dev", None), ("", None), (None, None)])
def test_version_efforts(version: str | None, limit: tuple[str, ...] | None) -> None:
    assert effort.version_efforts(version) == limit


def test_both_limits_hold_at_once() -> None:
    assert effort.both(None, None) is None
    assert effort.both(("low", "high"), None) == ("low", "high")
    assert effort.both(None, ("medium",)) == ("medium",)
    assert effort.both(("high", "low", "medium"), ("medium", "high", "xhigh")) == ("medium", "high")
    assert effort.both(("low",), ("high",)) == ("low",)  # nothing shared: the model's own table
