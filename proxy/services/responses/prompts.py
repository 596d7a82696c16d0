"""Prompt templates (`/v1/prompts`): create, versions, get, list, delete, per client key; and
`prompt` on a create, rendered into the request's instructions (core/prompts.py says how).

Values of a create's `prompt.variables`: a string or an input_text part is its text; an
input_file part is the file's text (by `file_id`, `file_url` or `file_data`, read as an
input_file is: services/responses/inputs.py); an input_image part becomes the marker
`[image: <name>]` in the instructions, and the image itself opens the input as a user message
(`core/prompts.image_message`): the instructions are the fleet's system message, text only for
the chat templates a vLLM fleet serves, so the image goes where a vision model reads images.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from proxy.core.errors import NotFound
from proxy.core.ids import IdFactory, new_id
from proxy.core.prompts import (
    MAX_VERSIONS,
    Expansion,
    image_marker,
    image_message,
    input_items,
    missing,
    parse_ref,
    parse_template,
    render,
    too_large,
)
from proxy.core.request.fields import at, bad
from proxy.core.request.paging import PageRequest, list_body
from proxy.store.base import Store
from proxy.store.objects.prompts import TOO_MANY, RedisPrompts

PROMPT = "pmpt"
# An input_file variable's text: (the part, its path) → text.
FileText = Callable[[dict[str, Any], str], Awaitable[str]]


class Prompts:
    def __init__(self, prompts: RedisPrompts, store: Store, *, ttl: int,
                 clock: Callable[[], float] = time.time, ids: IdFactory = new_id) -> None:
        self._prompts = prompts
        self._store = store  # for the key's storage budget
        self._ttl = ttl
        self._clock = clock
        self._ids = ids

    @staticmethod
    def _missing(prompt_id: str, version: str | None = None, param: str = "prompt_id"
                 ) -> NotFound:
        shown = f" version {version}" if version else ""
        return NotFound(f"Prompt with id '{prompt_id}'{shown} not found.", param=param)

    async def _add(self, tenant: str, prompt_id: str, body: dict[str, Any], *, new: bool
                   ) -> dict[str, Any]:
        template, defaults = parse_template(body)
        await self._store.check_storage(tenant)
        prompt = {"id": prompt_id, "object": "prompt", "created_at": int(self._clock()),
                  "prompt": template, "variables": defaults}
        version = await self._prompts.add_version(tenant, prompt, ttl=self._ttl, new=new)
        if version == TOO_MANY:
            raise bad("prompt", f"Prompt '{prompt_id}' has {MAX_VERSIONS} versions, the most "
                                "this server keeps; create a new prompt.")
        if version == 0:
            raise self._missing(prompt_id)
        return {**prompt, "version": str(version)}

    async def create(self, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._add(tenant, self._ids(PROMPT), body, new=True)

    async def update(self, tenant: str, prompt_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._add(tenant, prompt_id, body, new=False)

    async def get(self, tenant: str, prompt_id: str, version: str | None) -> dict[str, Any]:
        if version is not None and not version.isdigit():
            raise self._missing(prompt_id, version, "version")
        prompt = await self._prompts.get(tenant, prompt_id, version)
        if prompt is None:
            raise self._missing(prompt_id, version)
        return prompt

    async def list(self, tenant: str, page: PageRequest) -> dict[str, Any]:
        data, more = await self._prompts.list(tenant, page)
        return list_body(data, more)

    async def delete(self, tenant: str, prompt_id: str) -> dict[str, Any]:
        if not await self._prompts.delete(tenant, prompt_id):
            raise self._missing(prompt_id)
        return {"id": prompt_id, "object": "prompt.deleted", "deleted": True}

    async def render_into(self, tenant: str, body: dict[str, Any], file_text: FileText, *,
                          max_bytes: int) -> dict[str, Any]:
        """`body` with its `prompt` rendered into `instructions` (before the create's own),
        or unchanged when it names none. An unknown id or version is a 400 naming it (what a
        create names that does not exist is the request's fault, as previous_response_id).
        The instructions may be no larger than `max_bytes`: their size is added up as each
        value is known (core/prompts.py `Expansion`), and past it the create is a 400 naming
        the variable that pushed it over (`prompt` for a default), before the next value is
        read and before any text is built."""
        if body.get("prompt") is None:
            return body
        ref = parse_ref(body["prompt"])
        prompt = await self._prompts.get(tenant, ref.id, ref.version)
        if prompt is None:
            param = "prompt.version" if ref.version else "prompt.id"
            raise bad(param, f"Invalid '{param}': prompt '{ref.id}'"
                             f"{f' version {ref.version}' if ref.version else ''} not found.")
        template = str(prompt["prompt"])
        defaults = prompt.get("variables") or {}
        own = body.get("instructions")
        own = own if isinstance(own, str) and own else ""
        expansion = Expansion.of(template)
        size = expansion.fixed + (len(own.encode()) + 2 if own else 0)
        if size > max_bytes:
            raise too_large("prompt", max_bytes)
        values: dict[str, str] = {}
        images: dict[str, dict[str, Any]] = {}
        for name, count in expansion.occurrences.items():
            given = ref.variables.get(name)
            if isinstance(given, dict) and given.get("type") == "input_image":
                values[name] = image_marker(name)
                images[name] = given
            elif name in ref.variables:
                values[name] = await _value(given, name, file_text)
            elif name in defaults:
                values[name] = str(defaults[name])
            else:
                raise missing(name)
            size += count * len(values[name].encode())
            if size > max_bytes:
                raise too_large(at("prompt.variables", name) if name in ref.variables
                                else "prompt", max_bytes)
        text = render(template, values)
        if own:
            text = f"{text}\n\n{own}"
        echoed = {"id": ref.id, "version": str(prompt["version"]),
                  "variables": ref.variables or None}
        rendered = {**body, "instructions": text, "prompt": echoed}
        if images:
            rendered["input"] = [image_message(images), *input_items(body.get("input"))]
        return rendered


async def _value(given: Any, name: str, file_text: FileText) -> str:
    where = at("prompt.variables", name)
    if isinstance(given, str):
        return given
    kind = given.get("type")
    if kind == "input_text":
        text = given.get("text")
        if not isinstance(text, str):
            raise bad(at(where, "text"), f"Invalid '{at(where, 'text')}': expected a string.")
        return text
    if kind == "input_file":
        return await file_text(given, where)
    raise bad(at(where, "type"), f"Invalid '{at(where, 'type')}': expected a string or an "
                                 "input_text, input_image or input_file part.")
