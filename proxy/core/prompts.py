"""Prompt templates (`/v1/prompts`) and `prompt: {id, version?, variables?}` on a create. Pure.

A template is text with `{{name}}` placeholders (spaces inside the braces allowed). A version
may give `variables`: default values, used when a create does not give one. Rendering fills
every placeholder; one without a value is a 400 naming `prompt.variables.<name>` (a model that
reads a literal `{{name}}` answers something else than asked, silently). Variables a create
gives that the template does not use are ignored, as a template's older versions may not use
every variable its callers send.

An input_image value cannot sit in the instructions (the fleet's system message is text for
the chat templates vLLM serves): the placeholder becomes `[image: <name>]` and the images open
the input as one user message that names them the same way, so a vision model sees each image
beside the name the instructions use.

The rendered text becomes the request's instructions (the first system message), followed by
the create's own `instructions` when it gives them too, after a blank line: the template is the
reusable part, the create's instructions the call's own addition (OpenAI's docs say nothing of
the combination; keeping both loses nothing the caller sent).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from proxy.core.request.fields import at, bad, expect_object, opt_str, req_str

# A template's size, as sent: instructions, not documents (files are for those).
MAX_TEMPLATE_BYTES = 256 * 1024
MAX_VARIABLES = 64
MAX_NAME = 128
# Versions one prompt may have: each is kept (a create may name any), so they are bounded.
MAX_VERSIONS = 100
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_.-]{1,128})\s*\}\}")
# The value kinds a create may give (the SDK's ResponsePrompt.Variables).
PART_KINDS = ("input_text", "input_image", "input_file")


@dataclass(frozen=True)
class PromptRef:
    """A create's `prompt`, as given."""

    id: str
    version: str | None
    variables: dict[str, Any]


def parse_template(body: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """(template, default variables) of a `POST /v1/prompts[/{id}]` body."""
    template = req_str(body, "prompt", nonempty=True)
    if len(template.encode()) > MAX_TEMPLATE_BYTES:
        raise bad("prompt", f"Invalid 'prompt': longer than {MAX_TEMPLATE_BYTES} bytes.")
    raw = expect_object(body.get("variables") or {}, "variables")
    if len(raw) > MAX_VARIABLES:
        raise bad("variables", f"Invalid 'variables': more than {MAX_VARIABLES}.")
    defaults = {}
    for name, value in raw.items():
        where = at("variables", name[:MAX_NAME])
        if not isinstance(value, str):
            raise bad(where, f"Invalid '{where}': a default value must be a string.")
        defaults[name] = value
    return template, defaults


def parse_ref(value: Any) -> PromptRef:
    """A create's `prompt` object: `id`, `version` (a version number, as a string), `variables`
    (strings or input_text / input_image / input_file parts)."""
    ref = expect_object(value, "prompt")
    prompt_id = req_str(ref, "id", "prompt")
    version = opt_str(ref, "version", "prompt", max_len=16)
    if version is not None and not version.isdigit():
        raise bad("prompt.version", f"Invalid 'prompt.version': {version!r} is not a version "
                                    "number.")
    raw = expect_object(ref.get("variables") or {}, "prompt.variables")
    if len(raw) > MAX_VARIABLES:
        raise bad("prompt.variables", f"Invalid 'prompt.variables': more than {MAX_VARIABLES}.")
    for name, given in raw.items():
        where = at("prompt.variables", name[:MAX_NAME])
        if isinstance(given, str):
            continue
        part = expect_object(given, where)
        if part.get("type") not in PART_KINDS:
            raise bad(at(where, "type"), f"Invalid '{at(where, 'type')}': expected a string or "
                                         "an input_text, input_image or input_file part.")
    return PromptRef(prompt_id, version, dict(raw))


def names(template: str) -> list[str]:
    """The placeholders' names, in order, each once."""
    return list(dict.fromkeys(PLACEHOLDER.findall(template)))


@dataclass(frozen=True)
class Expansion:
    """What rendering a template makes of it, known before anything is built: `fixed` bytes of
    text outside the placeholders, and each name's number of occurrences (in order). Rendered
    size = fixed + sum(occurrences * the value's bytes): a 129-byte create naming a template of
    52,428 `{{x}}` with a 2 KB default would build 200 MiB, so the size is checked
    against the bound as each value is known, and the text is built only when it fits."""

    fixed: int
    occurrences: dict[str, int]

    @classmethod
    def of(cls, template: str) -> Expansion:
        # Two passes in C (a template may hold 52,428 placeholders), no match objects.
        return cls(len(PLACEHOLDER.sub("", template).encode()),
                   dict(Counter(PLACEHOLDER.findall(template))))


def render(template: str, values: dict[str, str]) -> str:
    """The template with every placeholder replaced (`values` holds one for each: `names`)."""
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def missing(name: str) -> Exception:
    where = at("prompt.variables", name)
    return bad(where, f"Missing required parameter: '{where}' (the prompt template uses "
                      f"{{{{{name}}}}}).")


def too_large(param: str, max_bytes: int) -> Exception:
    return bad(param, f"Invalid '{param}': the rendered prompt is larger than {max_bytes} "
                      "bytes (--max-body-bytes).")


def image_marker(name: str) -> str:
    """What stands in the instructions for the image variable `name`."""
    return f"[image: {name}]"


def image_message(images: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The user message that carries a prompt's image variables, each after its marker."""
    content: list[dict[str, Any]] = [
        {"type": "input_text", "text": "Images the instructions refer to:"}]
    for name, part in images.items():
        content += [{"type": "input_text", "text": image_marker(name)}, part]
    return {"type": "message", "role": "user", "content": content}


def input_items(given: Any) -> list[Any]:
    """A create's `input` as a list of items (a string is one user message), to put more in
    front of it."""
    if given is None:
        return []
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    if not isinstance(given, list):
        raise bad("input", "Invalid 'input': expected a string or an array of input items.")
    return list(given)
