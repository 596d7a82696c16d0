"""What a Responses request names that is fetched before translation: its image URLs
(services/fleet/media.py) and the text of its `input_file` parts, by file id (the caller's own
files, files.py), by URL (fetched under --fetch-allow by the same fetcher as images, any content
type) or inline (`file_data`). Also the prompt templates a request names (`prompt`): the service
renders one into the body before the body is parsed
(services/responses/prompts.py).

Every file's text counts in the request's expansion budget (core/request/expansion.py): a
request may expand to no more than --max-body-bytes however small the files it names, and an
inline PDF whose text inflates past it is refused the same way. A file is measured against what
is left of that budget before it is read: a stored file by its recorded size (a 400 naming
`...file_id` with nothing read), a URL's download as it arrives, a PDF's text as it is
extracted (services/files/extraction.py, in a child process): one small request never makes
the proxy hold more than its budget. The texts are keyed in the
request's `media` map (core/request/items.py `file_key`), which translation reads. History's
files (a previous response's, a conversation's) are read again on every turn: the stored item
keeps the reference, not the text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from proxy.core.documents import Unreadable
from proxy.core.errors import InvalidRequest
from proxy.core.request.items import (
    file_key,
    file_parts,
    inline_file,
    parse_file_part,
    unreadable,
)
from proxy.core.types import Item
from proxy.services.files.extraction import Extractor
from proxy.services.fleet.media import MediaFetcher
from proxy.services.process import offload

if TYPE_CHECKING:
    from proxy.services.files.files import Files
    from proxy.services.responses.prompts import Prompts


class Budget(Protocol):
    """What a request may still expand by (core/request/expansion.py `Expansion`)."""

    @property
    def left(self) -> int: ...

    def spend(self, size: int, param: str) -> None: ...


@dataclass
class _PromptBudget:
    """A prompt's file variables: together no more than the rendered prompt may be."""

    left: int

    def spend(self, size: int, param: str) -> None:
        self.left -= size
        if self.left < 0:
            raise InvalidRequest(f"Invalid '{param}': the prompt's files are larger than "
                                 "--max-body-bytes.", param=param)


@dataclass(frozen=True)
class RequestInputs:
    media: MediaFetcher
    files: Files | None = None
    prompts: Prompts | None = None
    # Reads inline and fetched files (a stored file is read by `files`, with its own).
    extractor: Extractor = field(default_factory=Extractor)

    async def for_items(self, tenant: str, new: Sequence[Item], history: Sequence[Item],
                        history_param: str, budget: Budget, *, size: int = 0
                        ) -> dict[str, str]:
        """The request's `media` map: image URL → data: URL, `file_key` → the file's text.
        `size`: the body's bytes; a large body's parts are walked off the loop."""
        media = await self.media.for_items(new, history, history_param, size=size)
        wanted = await offload.run(size, _files_wanted, new, history, history_param)
        media.update(await self._file_texts(tenant, wanted, budget))
        return media

    async def _file_texts(self, tenant: str, wanted: dict[str, tuple[dict[str, Any], str]],
                          budget: Budget) -> dict[str, str]:
        if not wanted:
            return {}
        urls = {str(part["file_url"]): f"{where}.file_url" for part, where in wanted.values()
                if part.get("file_url") is not None}
        fetched = (await self.media.fetch_files(urls, limit=budget.left) if urls else {})
        out: dict[str, str] = {}
        for key, (part, where) in wanted.items():
            text = await self._text(tenant, part, where, fetched, budget.left)
            budget.spend(_utf8_size(text), where)
            out[key] = text
        return out

    async def _text(self, tenant: str, part: dict[str, Any], where: str,
                    fetched: dict[str, tuple[str, bytes]], left: int) -> str:
        """The part's text; `left`: what the request may still expand by (a PDF's extraction
        stops past it, a stored file larger is refused unread)."""
        name = part.get("filename")
        if part.get("file_id") is not None:
            if self.files is None:
                raise InvalidRequest(f"Invalid '{where}.file_id': this server keeps no "
                                     "files.", param=f"{where}.file_id")
            return await self.files.text_of(tenant, str(part["file_id"]), where, limit=left)
        if part.get("file_url") is not None:
            url = str(part["file_url"])
            kind, raw = fetched[url]
            name, media_type = name or urlsplit(url).path, kind or None
        else:
            raw, media_type = await asyncio.to_thread(
                inline_file, str(part.get("file_data", "")), where)
        try:
            return await self.extractor.text(raw, name, media_type, chars=left, owner=tenant)
        except Unreadable as exc:
            raise unreadable(exc, where) from None

    async def with_prompt(self, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
        """`body` with its `prompt` rendered into its instructions (prompts.py)."""
        if body.get("prompt") is None:
            return body
        if self.prompts is None:
            raise InvalidRequest("Invalid 'prompt': this server keeps no prompt templates.",
                                 param="prompt")

        budget = _PromptBudget(self.media.max_bytes)

        async def one_file(given: dict[str, Any], where: str) -> str:
            part = parse_file_part(given, where)
            url = part.get("file_url")
            fetched = (await self.media.fetch_files({str(url): f"{where}.file_url"},
                                                    limit=budget.left)
                       if url is not None else {})
            text = await self._text(tenant, part, where, fetched, budget.left)
            budget.spend(_utf8_size(text), where)
            return text

        # The rendered instructions are part of what the request expands to: a file's text
        # in a variable is bounded like one in `input`, and a template repeating a value is
        # refused before it is built.
        return await self.prompts.render_into(tenant, body, one_file,
                                               max_bytes=self.media.max_bytes)


def _utf8_size(text: str) -> int:
    # An ASCII text's size is its length: no copy of a file's text just to measure it.
    return len(text) if text.isascii() else len(text.encode())


def _files_wanted(new: Sequence[Item], history: Sequence[Item], history_param: str
                  ) -> dict[str, tuple[dict[str, Any], str]]:
    """`file_key` → (the input_file part, the path a 400 names), new input last."""
    wanted: dict[str, tuple[dict[str, Any], str]] = {}
    for part, _ in file_parts(history, None):
        wanted[file_key(part)] = (part, history_param)
    for part, where in file_parts(new):
        wanted[file_key(part)] = (part, where or "input")
    return wanted
