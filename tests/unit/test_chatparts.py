"""core/translate/chatparts.py: every URL a replica's chat parser would fetch is found (the
proxy vets it), and a part the proxy cannot classify is refused naming it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import InvalidRequest
from proxy.core.translate.chatparts import media_urls

METADATA = "http://169.254.169.254/latest/meta-data/"
INTERNAL = "http://10.0.0.7/x"

# Every spelling vLLM's parser fetches (vllm/entrypoints/chat_utils.py), with the key the URL
# sits under.
FETCHED: list[tuple[dict[str, Any], str]] = [
    ({"type": "image_url", "image_url": {"url": METADATA}}, "image_url"),
    ({"type": "image_url", "image_url": METADATA}, "image_url"),
    ({"type": "input_image", "image_url": METADATA}, "image_url"),
    ({"image_url": METADATA}, "image_url"),
    ({"image_url": {"url": INTERNAL}}, "image_url"),
    ({"video_url": INTERNAL}, "video_url"),
    ({"video_url": {"url": METADATA}, "uuid": "v1"}, "video_url"),
    ({"audio_url": METADATA}, "audio_url"),
    ({"type": "audio_url", "audio_url": {"url": INTERNAL}}, "audio_url"),
    ({"type": "video_url", "video_url": {"url": METADATA}}, "video_url"),
    # With a `uuid`, vLLM reads the URL keys whatever the type says.
    ({"type": "text", "text": "hi", "uuid": "u", "image_url": METADATA}, "image_url"),
    ({"type": "input_audio", "input_audio": {"data": "", "format": "wav"}, "uuid": "u",
      "audio_url": INTERNAL}, "audio_url"),
]


@pytest.mark.parametrize(("part", "key"), FETCHED)
@pytest.mark.parametrize("role", ["system", "developer", "user", "assistant", "tool"])
def test_every_spelling_vllm_fetches_is_found_in_every_role(part: dict[str, Any], key: str,
                                                            role: str) -> None:
    part = copy.deepcopy(part)
    expected = part[key] if isinstance(part[key], str) else part[key]["url"]
    messages = [{"role": "user", "content": "hi"},
                {"role": role, "content": [{"type": "text", "text": "see"}, part]}]
    found = list(media_urls(messages))
    assert [(ref.url, ref.where) for ref in found] == [(expected,
                                                        f"messages[1].content[1].{key}")]
    found[0].holder[found[0].slot] = "data:x;base64,"
    assert not list(media_urls(messages))  # replaced where vLLM reads it


@pytest.mark.parametrize("part", [
    {"type": "file", "file": {"file_data": "eA==", "filename": "a.txt"}},
    {"type": "input_file", "file_url": METADATA}, {"type": "image", "url": METADATA},
    {"text": "no type"}, {"type": 3}, {"type": {"a": 1}}, {"type": ["text"]}, 42, ["x"],
    {"type": "image_embeds", "image_embeds": "AAAA"},
    {"type": "text", "text": "x", "uuid": "u", "prompt_embeds": "AAAA"},
    {"type": "image_url", "image_url": 7}, {"type": "image_url", "image_url": {"url": 7}}])
def test_a_part_that_cannot_be_classified_is_refused_naming_it(part: Any) -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}, part]}]
    with pytest.raises(InvalidRequest) as info:
        list(media_urls(messages))
    assert str(info.value.param).startswith("messages[0].content[1]")


def test_text_data_urls_and_inline_audio_pass_untouched() -> None:
    messages = [{"role": "user", "content": [
        "bare", {"type": "text", "text": "a"}, {"type": "input_text", "text": "b"},
        {"type": "refusal", "refusal": "no"},
        {"type": "image_url", "image_url": {"url": "DATA:image/png;base64,AA"}},
        {"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}},
        {"type": "image_url", "image_url": {"url": None}, "uuid": "cached"}]},
        {"role": "assistant", "content": None}, {"role": "user", "content": "plain"}]
    assert list(media_urls(messages)) == []


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.sampled_from(["type", "image_url", "url", "uuid",
                                                        "video_url", "text", "input_audio"]),
                                       inner, max_size=3), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries({"role": st.just("user"), "content": _JSON}), max_size=3))
def test_any_json_is_classified_or_refused_never_an_error(messages: list[Any]) -> None:
    try:
        for ref in media_urls(messages):
            assert isinstance(ref.url, str) and not ref.url.lower().startswith("data:")
    except InvalidRequest as refused:
        assert str(refused.param).startswith("messages[")
