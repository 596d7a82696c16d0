"""What a Responses request names that is fetched before translation: its image URLs
(services/fleet/media.py) and the text of its `input_file` parts, by file id (the caller's own
files, files.py), by URL (fetched under --fetch-allow by the same fetcher as images, any content
type) or inline (`file_data`). Also the prompt templates a request names (`prompt`): the service
renders one into the body before the body is parsed
(services/responses/prompts.py).

Every file's text counts in the request's expansion budget (core/request/expansion.py): a
request may expand to no more than --max-body-bytes however small the files it names, and an
inline PDF whose text inflates past it is refused the same way. The texts are keyed in the
request's `media` map (core/request/items.py `file_key`), which translation reads. History's
files (a previous response's, a conversation's) are read again on every turn: the stored item
keeps the reference, not the text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from proxy.core.errors import InvalidRequest
from proxy.core.request.items import (
    document_text,
    file_key,
    file_parts,
    file_text,
    parse_file_part,
)
from proxy.core.types import Item
from proxy.services.fleet.media import MediaFetcher

if TYPE_CHECKING:
    from proxy.services.files.files import Files
    from proxy.services.responses.prompts import Prompts

Spend = Callable[[int, str], None]


@dataclass(frozen=True)
class RequestInputs:
    media: MediaFetcher
    files: Files | None = None
    prompts: Prompts | None = None

    async def for_items(self, tenant: str, new: Sequence[Item], history: Sequence[Item],
                        history_param: str, spend: Spend) -> dict[str, str]:
        """The request's `media` map: image URL → data: URL, `file_key` → the file's text."""
        media = await self.media.for_items(new, history, history_param)
        media.update(await self._file_texts(tenant, new, history, history_param, spend))
        return media

    async def _file_texts(self, tenant: str, new: Sequence[Item], history: Sequence[Item],
                          history_param: str, spend: Spend) -> dict[str, str]:
        wanted: dict[str, tuple[dict[str, Any], str]] = {}
        for part, _ in file_parts(history, None):
            wanted[file_key(part)] = (part, history_param)
        for part, where in file_parts(new):
            wanted[file_key(part)] = (part, where or "input")
        if not wanted:
            return {}
        urls = {str(part["file_url"]): f"{where}.file_url" for part, where in wanted.values()
                if part.get("file_url") is not None}
        fetched = await self.media.fetch_files(urls) if urls else {}
        out: dict[str, str] = {}
        for key, (part, where) in wanted.items():
            text = await self._text(tenant, part, where, fetched)
            spend(len(text.encode()), where)
            out[key] = text
        return out

    async def _text(self, tenant: str, part: dict[str, Any], where: str,
                    fetched: dict[str, tuple[str, bytes]]) -> str:
        name = part.get("filename")
        if part.get("file_id") is not None:
            if self.files is None:
                raise InvalidRequest(f"Invalid '{where}.file_id': this server keeps no "
                                     "files.", param=f"{where}.file_id")
            return await self.files.text_of(tenant, str(part["file_id"]), where)
        # Extraction is CPU-bound (a PDF's takes seconds when large): off the event loop, so
        # the streams this process serves keep flowing meanwhile.
        if part.get("file_url") is not None:
            url = str(part["file_url"])
            kind, raw = fetched[url]
            return await asyncio.to_thread(document_text, raw, where,
                                           name or urlsplit(url).path, kind or None)
        return await asyncio.to_thread(file_text, str(part.get("file_data", "")), where, name)

    async def with_prompt(self, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
        """`body` with its `prompt` rendered into its instructions (prompts.py)."""
        if body.get("prompt") is None:
            return body
        if self.prompts is None:
            raise InvalidRequest("Invalid 'prompt': this server keeps no prompt templates.",
                                 param="prompt")

        async def one_file(given: dict[str, Any], where: str) -> str:
            part = parse_file_part(given, where)
            url = part.get("file_url")
            fetched = (await self.media.fetch_files({str(url): f"{where}.file_url"})
                       if url is not None else {})
            return await self._text(tenant, part, where, fetched)

        # The rendered instructions are part of what the request expands to: a file's text
        # in a variable is bounded like one in `input`, and a template repeating a value is
        # refused before it is built.
        return await self.prompts.render_into(tenant, body, one_file,
                                               max_bytes=self.media.max_bytes)
