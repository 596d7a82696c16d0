"""compat/run.py's two sets of client versions (`make compat`): the pinned one, and the newest
the registries publish, held to the floors of the surface the proxy serves. No install and no
network here: the parts that decide what runs and what fails."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

RUN = Path(__file__).resolve().parents[2] / "compat" / "run.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compat_run", RUN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


run = _load()


def test_a_release_compares_by_its_numbers_not_its_text() -> None:
    assert run._release("0.171.0") == (0, 171, 0)
    assert run._release("7.59.0-beta.1") == (7, 59, 0)
    assert run._release("3.57.0.post1") == (3, 57, 0)
    assert run._release("0.99.0") < run._release("0.171")  # as text, "0.99" sorts after


def test_the_newest_set_fails_below_its_floors_or_without_a_client() -> None:
    floors = run.NEWEST_FLOORS
    assert floors["npm:@openai/codex"] == "0.171" and floors["npm:openai"] == "7.59"
    assert floors["pip:openai"] == "3.57"
    enough = {"pip:openai": "3.57.0", "npm:openai": "7.60.1", "npm:@openai/codex": "0.171.0"}
    assert run.below_floors(enough) == []
    short = {"pip:openai": "3.56.9", "npm:openai": "7.59.0"}
    assert run.below_floors(short) == ["pip:openai 3.56.9 is below 3.57",
                                       "npm:@openai/codex missing is below 0.171"]


def test_both_sets_run_unless_one_is_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COMPAT_SETS", raising=False)
    assert [s.name for s in run.sets()] == ["pinned", "newest"]
    monkeypatch.setenv("COMPAT_SETS", "newest")
    assert [s.name for s in run.sets()] == ["newest"]
    monkeypatch.setenv("COMPAT_SETS", "newest,latest")
    with pytest.raises(SystemExit, match="names no set: latest"):
        run.sets()


def test_each_set_runs_every_client_from_its_own_folders(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COMPAT_ONLY", raising=False)
    every = ["python_sdk", "openai_agents", "openai_agents_ws", "node_sdk", "ai_sdk", "codex"]
    for where in (run.PINNED, run.NEWEST):
        names = [c.name for c in run.clients(where)]
        # lanes and steering need openai 3.57: only the newest set runs that client
        assert names == every + (["python_sdk_ws_lanes"] if where is run.NEWEST else [])
        for client in run.clients(where):
            assert client.argv[0] in (str(where.python), "node")
    assert run.PINNED.py != run.NEWEST.py and run.PINNED.node != run.NEWEST.node


def test_the_newest_set_installs_the_pinned_sets_packages() -> None:
    assert run.pip_names() == ["openai", "openai-agents"]
    assert set(run.npm_names()) >= {"openai", "@openai/codex", "ai", "@ai-sdk/openai"}
