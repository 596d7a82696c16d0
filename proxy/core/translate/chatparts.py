"""The content parts of a chat request (`/v1/chat/completions`), read as vLLM's chat parser reads
them, to find every URL a replica would fetch. No I/O; the one change made to the parts is the
bare-string form of an `image_url` (`audio_url`, `video_url`) part, spelled as the object vLLM
validates.

vLLM's parser (`vllm/entrypoints/chat_utils.py`) fetches more spellings than the OpenAI API
has: `image_url`, `audio_url` and `video_url` parts; `input_image` parts (a Responses shape,
`image_url` a string); and parts with no `type` (or with a `uuid`, whatever their type) that
hold an `image_url`, `audio_url` or `video_url` key, as a string or as `{"url": ...}`. It does
so for every role. So the rule here does not follow vLLM's dispatch (which a new vLLM version
may change): every `image_url`, `audio_url` and `video_url` key of every part is a media URL,
whatever the part's type says, and comes out of `media_urls` for the proxy to fetch and inline
(services/fleet/media.py) unless it is already a `data:` URL.

Parts the proxy cannot classify are refused (400 naming `messages[i].content[j]`), not
forwarded: an unknown type may be one a later vLLM fetches. Known: strings and the text kinds,
the media kinds above, `input_audio` (inline base64: vLLM makes a data: URL of it), and
type-less parts holding a media key. Refused too: parts carrying vLLM's tensor inputs
(`image_embeds`, `audio_embeds`, `prompt_embeds`, `image_pil`), which make a replica
deserialise a tenant's bytes into tensors and which no OpenAI client sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core.errors import InvalidRequest

# The media keys vLLM reads a URL from → the content type family the fetched file must be.
MEDIA_KEYS = {"image_url": "image", "audio_url": "audio", "video_url": "video"}
TEXT_KINDS = frozenset(("text", "input_text", "output_text", "refusal", "thinking",
                        "tool_reference"))
MEDIA_KINDS = frozenset((*MEDIA_KEYS, "input_image", "input_audio"))
TENSOR_KEYS = ("image_embeds", "audio_embeds", "prompt_embeds", "image_pil")
_TENSOR_KEYS = frozenset(TENSOR_KEYS)
_MEDIA_KEY_SET = frozenset(MEDIA_KEYS)
_SPECIAL_KEYS = _TENSOR_KEYS | _MEDIA_KEY_SET


@dataclass(frozen=True, slots=True)
class MediaUrl:
    """One URL a replica would fetch: `holder[slot]` is the URL (replaced by its data: URL once
    fetched), `family` the content type it must have, `where` the path a 400 names."""

    holder: dict[str, Any]
    slot: str
    url: str
    family: str
    where: str


def media_urls(messages: Any) -> list[MediaUrl]:
    """The media URLs of chat `messages` that are not data: URLs, in order. Raises
    InvalidRequest for a part it cannot classify. A message or list that is not the expected
    shape is left to vLLM to refuse: it holds no part vLLM would fetch."""
    found: list[MediaUrl] = []
    if not isinstance(messages, list):
        return found
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            # A body may hold 600,000 parts, all walked on the event loop: text parts take one
            # test, and a part's path is spelled only when a URL or a refusal names it.
            if isinstance(part, dict):
                kind = part.get("type")
                if type(kind) is str and kind in TEXT_KINDS and _SPECIAL_KEYS.isdisjoint(part):
                    continue
            elif isinstance(part, str):  # vLLM reads a bare string as text
                continue
            _classify(part, i, j, found)
    return found


def _classify(part: Any, i: int, j: int, found: list[MediaUrl]) -> None:
    if not isinstance(part, dict):
        raise _refused(_at(i, j), "expected a content part object")
    kind = part.get("type")
    if kind is not None and not isinstance(kind, str):
        raise _refused(_at(i, j, "type"), "expected a string")
    if not _TENSOR_KEYS.isdisjoint(part):
        raise _refused(_at(i, j), "embedding and tensor inputs are not accepted by this server")
    if not (kind in TEXT_KINDS or kind in MEDIA_KINDS
            or (kind is None and not _MEDIA_KEY_SET.isdisjoint(part))):
        shown = "missing" if kind is None else repr(kind)[:64]
        raise _refused(_at(i, j), f"the part's type is {shown}; expected one of "
                                  f"{', '.join(sorted(TEXT_KINDS | MEDIA_KINDS))}")
    for key, family in MEDIA_KEYS.items():
        if key in part:
            url = _url_in(part, key, i, j)
            if url is not None and url[2][:5].lower() != "data:":
                found.append(MediaUrl(*url, family, _at(i, j, key)))


def _url_in(part: dict[str, Any], key: str, i: int, j: int
            ) -> tuple[dict[str, Any], str, str] | None:
    """(the object holding the URL, its key there, the URL), or None when there is none (vLLM
    then reads the media from its cache by `uuid`, or refuses the part)."""
    value = part[key]
    if value is None:
        return None
    if isinstance(value, str):
        if part.get("type") == key:  # the bare-string form some clients send for the object
            value = part[key] = {"url": value}
        else:
            return part, key, value
    if not isinstance(value, dict):
        raise _refused(_at(i, j, key), "expected a URL string or an object with a `url`")
    url = value.get("url")
    if url is None:
        return None
    if not isinstance(url, str):
        raise _refused(_at(i, j, f"{key}.url"), "expected a string")
    return value, "url", url


def _at(i: int, j: int, key: str = "") -> str:
    return f"messages[{i}].content[{j}]" + (f".{key}" if key else "")


def _refused(where: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid '{where}': {why}.", param=where)
