"""The Files API (`client.files`): upload, list, retrieve, content, delete, per client key.

A file lives `--response-ttl` seconds (the rule stored responses follow), or less when the
upload asks so (`expires_after`: anchor `created_at`, 3600 s to 30 days, as OpenAI's); its object
says when (`expires_at`). Its size is bounded by `--max-file-bytes` (exactly the limit is
accepted), and its bytes count in the key's storage budget (a key that holds its budget is
refused the upload, 429, as a storing create is). Files are stored as uploaded: any purpose the
SDK offers, any content; what can be read as text is decided where a file is read
(`text_of`: an input_file part).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from proxy.core.documents import Unreadable
from proxy.core.errors import InvalidRequest, NotFound, PayloadTooLarge, RateLimited
from proxy.core.policy.keyslots import KeySlots
from proxy.core.request.fields import bad, one_of
from proxy.core.request.items import unreadable
from proxy.core.request.paging import PageRequest, list_body
from proxy.services.files.extraction import Extractor
from proxy.store.base import Store
from proxy.store.objects.files import CHUNK_BYTES, BlobStore

# The purposes the SDK's `files.create` takes (types/file_purpose.py).
PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
# `expires_after.seconds` bounds, as OpenAI's.
MIN_EXPIRY = 3600
MAX_EXPIRY = 30 * 24 * 3600


@dataclass(frozen=True)
class Upload:
    """What the multipart body said (web/routes/files.py)."""

    filename: str
    purpose: str
    size: int
    chunks: AsyncIterable[bytes]  # the bytes, at most CHUNK_BYTES at a time
    expires_after: tuple[str | None, str | None] = (None, None)  # (anchor, seconds) as sent


class UploadSlots:
    """At most `limit` uploads in flight in this process (`--max-uploads-in-flight`), and at
    most half of them (rounded up) for any one key. Each may hold up to `--max-file-bytes`
    spooled to a temporary file while it streams in (web/routes/files.py), so their number
    bounds that disk together (deploy/k8s sizes /tmp from it). The per-key share keeps one
    tenant from taking every slot (a client that sends its bodies slowly holds a slot for as
    long as it keeps a byte coming within `--body-timeout`): the other keys keep the rest. One
    more is refused at once, before its body is read: a 429 with Retry-After, as a full
    admission queue is; there is no queue to wait in, so nothing is held for it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._keys = KeySlots(max(1, (limit + 1) // 2))  # one key's share: half, rounded up

    @property
    def per_key(self) -> int:
        return self._keys.per_key

    @property
    def used(self) -> int:
        return self._keys.total

    @contextlib.contextmanager
    def held(self, tenant: str) -> Iterator[None]:
        if self.used >= self.limit:
            raise RateLimited(f"This server is receiving {self.limit} uploads already; "
                              "please retry shortly.")
        with self._keys.taken(tenant) as free:
            if not free:
                raise RateLimited(f"This key's uploads in flight on this server are at its "
                                  f"share ({self.per_key} at once); please retry once one is "
                                  "done.")
            yield


def file_id() -> str:
    # OpenAI's ids are `file-` and an opaque string; ours are random hex (keys.py: no `}`).
    return "file-" + secrets.token_hex(16)


class Files:
    def __init__(self, blobs: BlobStore, store: Store, *, ttl: int, max_bytes: int,
                 max_in_flight: int, clock: Callable[[], float] = time.time,
                 ids: Callable[[], str] = file_id, extractor: Extractor | None = None) -> None:
        self._blobs = blobs
        self._store = store  # for the key's storage budget
        self._ttl = ttl
        self.max_bytes = max_bytes
        self.uploads = UploadSlots(max_in_flight)  # taken by the route, before the body is read
        self._clock = clock
        self._ids = ids
        # Reads documents off the loop and out of the default threads (PDFs in a child).
        self.extractor = extractor or Extractor()

    @staticmethod
    def missing(file_id: str, param: str = "file_id") -> NotFound:
        return NotFound(f"No such File object: {file_id}", param=param)

    def _lifetime(self, expires_after: tuple[str | None, str | None]) -> int:
        anchor, seconds = expires_after
        if anchor is None and seconds is None:
            return self._ttl
        one_of(anchor, ("created_at",), "expires_after[anchor]")
        try:
            wanted = int(seconds or "")
        except ValueError:
            raise bad("expires_after[seconds]", "Invalid 'expires_after[seconds]': expected "
                                                "an integer.") from None
        if not MIN_EXPIRY <= wanted <= MAX_EXPIRY:
            raise bad("expires_after[seconds]",
                      f"Invalid 'expires_after[seconds]': {wanted} is out of range; expected "
                      f"a value between {MIN_EXPIRY} and {MAX_EXPIRY}.")
        return min(wanted, self._ttl)

    async def check_storage(self, tenant: str) -> None:
        """Raise QuotaExceeded when the key already holds its storage budget (what the
        vector stores derive from its files counts there too)."""
        await self._store.check_storage(tenant)

    async def upload(self, tenant: str, upload: Upload) -> dict[str, Any]:
        purpose = one_of(upload.purpose, PURPOSES, "purpose")
        if upload.size > self.max_bytes:
            raise PayloadTooLarge(f"File is too large: {upload.size} bytes; this server takes "
                                  f"files of at most {self.max_bytes} bytes (--max-file-bytes).",
                                  param="file")
        ttl = self._lifetime(upload.expires_after)
        await self._store.check_storage(tenant)
        now = int(self._clock())
        file = {"id": self._ids(), "object": "file", "bytes": upload.size, "created_at": now,
                "expires_at": now + ttl, "filename": upload.filename, "purpose": purpose,
                "status": "processed", "status_details": None}
        await self._blobs.put(tenant, file, upload.chunks, ttl=ttl)
        return file

    async def retrieve(self, tenant: str, file_id: str) -> dict[str, Any]:
        file = await self._blobs.get(tenant, file_id)
        if file is None:
            raise self.missing(file_id)
        return file

    async def content(self, tenant: str, file_id: str
                      ) -> tuple[dict[str, Any], AsyncIterator[bytes]]:
        file = await self.retrieve(tenant, file_id)
        return file, self._blobs.read(tenant, file_id)

    async def delete(self, tenant: str, file_id: str) -> dict[str, Any]:
        if not await self._blobs.delete(tenant, file_id):
            raise self.missing(file_id)
        return {"id": file_id, "object": "file", "deleted": True}

    async def list(self, tenant: str, page: PageRequest, purpose: str | None
                   ) -> dict[str, Any]:
        data, more = await self._blobs.list(tenant, page, purpose)
        return list_body(data, more)

    async def text_of(self, tenant: str, file_id: str, where: str, *, limit: int) -> str:
        """The text of the key's file, for an input_file part at `where`: another key's file
        is an unknown id (400 naming the part), an unreadable one a 400 with the SDK's code.
        `limit`: the bytes the caller may still take (what is left of a request's expansion
        budget). A file larger is refused from its size alone, before a byte of it is read
        (no kind's text is longer than its file, but a PDF's: its reading stops past `limit`
        and the caller refuses the longer text)."""
        file = await self._blobs.get(tenant, file_id)
        if file is None:
            raise InvalidRequest(f"Invalid '{where}.file_id': no file with id {file_id!r} "
                                 "exists.", param=f"{where}.file_id")
        size = int(file.get("bytes") or 0)
        if size > limit:
            raise self._too_large(where, size, limit)
        data = await self._read(tenant, file_id, size, where, limit)
        try:
            return await self.extractor.text(data, str(file.get("filename") or ""), None,
                                             chars=limit, owner=tenant)
        except Unreadable as exc:
            raise unreadable(exc, where) from None

    async def _read(self, tenant: str, file_id: str, size: int, where: str,
                    limit: int) -> bytearray:
        """The file's bytes in one buffer of its recorded size, filled in place (a growing
        buffer is copied as it grows: twice the file at once)."""
        data = bytearray(size)
        filled = 0
        async for chunk in self._blobs.read(tenant, file_id):
            end = filled + len(chunk)
            if end > size:  # a record whose size is wrong: still never past the limit
                if end > limit:
                    raise self._too_large(where, end, limit)
                data += bytes(end - len(data))
            data[filled:end] = chunk
            filled = end
        del data[filled:]
        return data

    @staticmethod
    def _too_large(where: str, size: int, limit: int) -> InvalidRequest:
        # Named as the same refusal after reading is (the part, services/responses/inputs.py):
        # whether the size or the text told, the request expands too far.
        return InvalidRequest(f"Invalid '{where}': the file is {size} bytes, more than the "
                              f"{limit} bytes this request may still expand to "
                              "(--max-body-bytes).", param=where)


__all__ = ["CHUNK_BYTES", "Files", "Upload"]
