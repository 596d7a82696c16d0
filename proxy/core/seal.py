"""Sealed blobs: text we hand a client and later accept back (reasoning `encrypted_content`
today, compaction summaries later), authenticated so a client cannot hand us text of its own
making, and bounded so a small blob cannot inflate into gigabytes.

Format: `rpx2.` + urlsafe base64 of (HMAC-SHA256 tag, 32 bytes) + (zlib of the UTF-8 text).
The tag covers the version, the purpose and the compressed payload, so a blob sealed for one
purpose never opens for another, and it is checked (in constant time) *before* any byte is
inflated: a forged bomb costs one HMAC. Even a genuine blob is inflated by a streaming
decompressor stopped at `max_bytes`, the caller's cap (the body limit).

Any instance with the same secret opens any blob: the secret is fleet-wide, not per instance.
Rotation with overlap: a `Sealer` seals with its first secret and opens with any of them, so a
fleet moves to a new secret by first adding it second everywhere, then first, then dropping
the old one, without refusing a blob handed out meanwhile.
The text is compressed, not encrypted: it is not secret (reasoning text is also in `content`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

VERSION = "rpx2."
_TAG_BYTES = hashlib.sha256().digest_size


class SealError(ValueError):
    """A blob that is not one of ours: forged, altered, for another purpose, or too large."""


def _tag(purpose: str, payload: bytes, secret: bytes) -> bytes:
    # The purpose is length-prefixed so ("ab", "c...") and ("a", "bc...") never collide.
    head = f"{VERSION}{len(purpose)}:{purpose}".encode()
    return hmac.new(secret, head + payload, hashlib.sha256).digest()


def seal(purpose: str, text: str, secret: bytes) -> str:
    payload = zlib.compress(text.encode())
    raw = _tag(purpose, payload, secret) + payload
    return VERSION + base64.urlsafe_b64encode(raw).decode("ascii")


def open(purpose: str, blob: str, secret: bytes | Sequence[bytes], max_bytes: int) -> str:
    """The text of a blob sealed for `purpose` with `secret` (or any of several secrets);
    `SealError` for anything else."""
    keys = [secret] if isinstance(secret, bytes) else list(secret)
    if not blob.startswith(VERSION):
        raise SealError("not a sealed blob of this server")
    try:
        # Strict: the lenient decoder would skip characters that are not base64.
        raw = base64.b64decode(blob[len(VERSION):].encode("ascii"), altchars=b"-_",
                               validate=True)
    except (ValueError, binascii.Error):
        raise SealError("not valid base64") from None
    tag, payload = raw[:_TAG_BYTES], raw[_TAG_BYTES:]
    # Every key is checked (no early exit): the time taken does not tell which one matched.
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(tag, _tag(purpose, payload, key))
    if len(tag) != _TAG_BYTES or not matched:
        raise SealError("the seal does not match")
    inflater = zlib.decompressobj()
    try:
        # One byte past the cap tells "exactly at the cap" from "larger".
        data = inflater.decompress(payload, max_bytes + 1)
    except zlib.error:
        raise SealError("the payload is not valid zlib data") from None
    if len(data) > max_bytes or inflater.unconsumed_tail:
        raise SealError(f"the sealed text is larger than {max_bytes} bytes")
    if not inflater.eof:
        raise SealError("the payload is truncated")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SealError("the sealed text is not UTF-8") from None


@dataclass(frozen=True)
class Sealer:
    """`seal`/`open` bound to the fleet secrets and the size cap, built once by the services.
    `secrets[0]` seals; any of `secrets` opens."""

    secrets: tuple[bytes, ...]
    max_bytes: int

    def seal(self, purpose: str, text: str) -> str:
        return seal(purpose, text, self.secrets[0])

    def open(self, purpose: str, blob: str) -> str:
        return open(purpose, blob, self.secrets, self.max_bytes)
