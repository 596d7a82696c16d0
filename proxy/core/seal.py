"""Sealed blobs: text we hand a client and later accept back (reasoning `encrypted_content`
today, compaction summaries later), authenticated so a client cannot hand us text of its own
making, and bounded so a small blob cannot inflate into gigabytes.

Format: `rpx2.` + urlsafe base64 of (HMAC-SHA256 tag, 32 bytes) + (zlib of the UTF-8 text).
The tag covers the version, the purpose and the compressed payload, so a blob sealed for one
purpose never opens for another, and it is checked (in constant time) *before* any byte is
inflated: a forged bomb costs one HMAC. Even a genuine blob is inflated by a streaming
decompressor stopped at `max_bytes`: a per-blob cap well below the body limit
(`--max-sealed-bytes`); what all of a request's blobs open to is counted by
core/request/expansion.py. `verify` checks the tag alone (no inflation): a request's items are
verified when parsed and stored sealed, and opened only when the upstream request is built.

Any instance with the same secret opens any blob: the secret is fleet-wide, not per instance.
There is no default secret (a public one would let anyone seal blobs we accept): the operator's
`--fleet-secret`, else one random secret per deployment (services/process/sealing.py).
Rotation with overlap: a `Sealer` seals with its first secret and opens with any of them, so a
fleet moves to a new secret by first adding it second everywhere, then first, then dropping
the old one, without refusing a blob handed out meanwhile.
The text is compressed, not encrypted: it is not secret (reasoning text is also in `content`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from proxy.core.errors import InvalidRequest, StoreUnavailable

VERSION = "rpx2."
_TAG_BYTES = hashlib.sha256().digest_size


class SealError(ValueError):
    """A blob that is not one of ours: forged, altered, for another purpose, or too large."""


class SealTooLarge(SealError):
    """A genuine blob whose text is larger than the cap."""


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
    return _inflate(_payload(purpose, blob, secret), max_bytes)


def _payload(purpose: str, blob: str, secret: bytes | Sequence[bytes]) -> bytes:
    """The compressed payload of an authentic blob (nothing inflated yet)."""
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
    return payload


def _inflate(payload: bytes, max_bytes: int) -> str:
    inflater = zlib.decompressobj()
    try:
        # One byte past the cap tells "exactly at the cap" from "larger".
        data = inflater.decompress(payload, max_bytes + 1)
    except zlib.error:
        raise SealError("the payload is not valid zlib data") from None
    if len(data) > max_bytes or inflater.unconsumed_tail:
        raise SealTooLarge(f"the sealed text is larger than {max_bytes} bytes")
    if not inflater.eof:
        raise SealError("the payload is truncated")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SealError("the sealed text is not UTF-8") from None


@dataclass
class Sealer:
    """`seal`/`open` bound to the fleet secrets and the per-blob cap, built once per process
    (services/process/sealing.py). `secrets[0]` seals; any of `secrets` opens. No secrets: not known
    yet (the deployment's secret lives in a store that was unreachable at start; the service
    sets it once read), and every use is a 503 `store_unavailable` meanwhile."""

    secrets: tuple[bytes, ...]
    max_bytes: int

    def __post_init__(self) -> None:
        if not all(self.secrets):
            raise ValueError("a fleet secret cannot be empty")

    @property
    def ready(self) -> bool:
        return bool(self.secrets)

    def keys(self) -> tuple[bytes, ...]:
        """The secrets; `StoreUnavailable` while they are not known."""
        if not self.secrets:
            raise StoreUnavailable("Sealed content cannot be checked right now: the fleet "
                                   "secret is kept in the store, which is unreachable.")
        return self.secrets

    def seal(self, purpose: str, text: str) -> str:
        return seal(purpose, text, self.keys()[0])

    def verify(self, purpose: str, blob: str) -> None:
        """`SealError` unless the blob is authentic; nothing is inflated."""
        _payload(purpose, blob, self.keys())

    def open(self, purpose: str, blob: str) -> str:
        """The text; `SealTooLarge` past the per-blob cap."""
        return open(purpose, blob, self.keys(), self.max_bytes)


@contextlib.contextmanager
def seal_errors(where: str, kind: str) -> Iterator[None]:
    """A blob that does not open (`kind` items: reasoning, compaction) → 400 naming `where`."""
    try:
        yield
    except SealTooLarge as exc:
        raise InvalidRequest(f"Invalid '{where}': {exc} (--max-sealed-bytes).", param=where,
                             code="invalid_encrypted_content") from None
    except SealError:
        raise InvalidRequest(
            f"Invalid '{where}': the encrypted content could not be verified or decrypted; "
            f"send back {kind} items exactly as this server returned them.",
            param=where, code="invalid_encrypted_content") from None
