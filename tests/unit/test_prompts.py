"""core/prompts.py: templates, a create's `prompt`, rendering."""

from __future__ import annotations

import pytest

from proxy.core.errors import InvalidRequest
from proxy.core.prompts import missing, names, parse_ref, parse_template, render


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
