"""core/prompts.py: templates, a create's `prompt`, rendering."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.prompts import Expansion, missing, names, parse_ref, parse_template, render
from proxy.services.fleet.media import MediaFetcher
from proxy.services.responses.inputs import RequestInputs
from proxy.services.responses.prompts import Prompts


def test_placeholders_allow_spaces_and_render_each_occurrence() -> None:
    template = "Hi {{ name }}, {{name}} again; {{topic}}."
    assert names(template) == ["name", "topic"]
    assert render(template, {"name": "Ann", "topic": "tea"}) == "Hi Ann, Ann again; tea."


def test_a_template_needs_text_and_string_defaults() -> None:
    assert parse_template({"prompt": "x {{a}}", "variables": {"a": "1"}}) == ("x {{a}}",
                                                                              {"a": "1"})
    for body, param in (({}, "prompt"), ({"prompt": ""}, "prompt"),
                        ({"prompt": "x", "variables": {"a": 1}}, "variables.a")):
        with pytest.raises(InvalidRequest) as info:
            parse_template(body)
        assert info.value.param == param


def test_a_reference_is_checked_naming_the_field() -> None:
    ref = parse_ref({"id": "pmpt_1", "version": "2",
                     "variables": {"a": "x", "b": {"type": "input_text", "text": "y"}}})
    assert (ref.id, ref.version, sorted(ref.variables)) == ("pmpt_1", "2", ["a", "b"])
    for value, param in (({"version": "1"}, "prompt.id"),
                         ({"id": "p", "version": "latest"}, "prompt.version"),
                         ({"id": "p", "variables": {"a": {"type": "audio"}}},
                          "prompt.variables.a.type")):
        with pytest.raises(InvalidRequest) as info:
            parse_ref(value)
        assert info.value.param == param
    assert getattr(missing("topic"), "param", None) == "prompt.variables.topic"


# -- a template's rendered size is bounded before it is built -----------------------------------

class _OnePrompt:
    """The prompt store's `get`, holding one template."""

    def __init__(self, template: str, defaults: dict[str, str]) -> None:
        self.prompt = {"id": "pmpt_1", "version": "1", "prompt": template, "variables": defaults}

    async def get(self, tenant: str, prompt_id: str, version: str | None) -> dict[str, Any]:
        return self.prompt


def _inputs(template: str, defaults: dict[str, str], max_bytes: int) -> RequestInputs:
    prompts = Prompts(_OnePrompt(template, defaults), None, ttl=60)  # type: ignore[arg-type]
    return RequestInputs(MediaFetcher((), timeout=1, max_bytes=max_bytes), prompts=prompts)


def test_rendered_size_is_known_before_rendering() -> None:
    template = "Hi {{ name }}, {{name}} again; {{topic}}."
    expansion = Expansion.of(template)
    assert expansion.occurrences == {"name": 2, "topic": 1}
    values = {"name": "Ann", "topic": "t\u00e9a"}
    assert (expansion.fixed + sum(n * len(values[k].encode())
                                  for k, n in expansion.occurrences.items())
            == len(render(template, values).encode()))


async def test_a_template_that_expands_past_the_body_limit_is_refused_before_it_is_built() -> None:
    # The create: 52,428 `{{x}}` (256 KiB, the template limit) with a 2 KiB default
    # render to 107 MB. Refused as a 400 naming `prompt`, holding little more than the template.
    inputs = _inputs("{{x}}" * 52_428, {"x": "v" * 2048}, max_bytes=1 << 20)
    body = {"model": "m", "input": "hi", "prompt": {"id": "pmpt_1"}}
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRequest) as info:
            await inputs.with_prompt("t", body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.param == "prompt"
    assert peak < 4 << 20, peak  # old code: > 100 MB (the whole rendering)


async def test_a_variable_that_pushes_the_rendering_past_the_limit_is_named() -> None:
    inputs = _inputs("a {{x}} b {{y}} " * 100, {"y": "d"}, max_bytes=10_000)
    body = {"model": "m", "prompt": {"id": "pmpt_1", "variables": {"x": "v" * 200}}}
    with pytest.raises(InvalidRequest) as info:
        await inputs.with_prompt("t", body)
    assert info.value.param == "prompt.variables.x"
    fits = {"model": "m", "prompt": {"id": "pmpt_1", "variables": {"x": "v" * 50}},
            "instructions": "own"}
    rendered = await inputs.with_prompt("t", fits)
    assert rendered["instructions"].endswith("\n\nown")
    assert len(rendered["instructions"].encode()) <= 10_000
