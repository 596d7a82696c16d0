"""Sealed blobs: authenticated, purpose-bound and bounded on the way back in."""

from __future__ import annotations

import base64
import zlib

import pytest

from proxy.core import seal as sealmod
from proxy.core.errors import StoreUnavailable
from proxy.core.seal import Sealer, SealError, SealTooLarge

SECRET = b"fleet-secret"


def test_a_blob_opens_with_the_secret_and_purpose_it_was_sealed_with() -> None:
    blob = sealmod.seal("reasoning", "because ünïcode", SECRET)
    assert blob.startswith(sealmod.VERSION)
    assert sealmod.open("reasoning", blob, SECRET, 1024) == "because ünïcode"
    small = Sealer((SECRET,), 9).seal("reasoning", "x")
    assert Sealer((SECRET,), 1024).open("reasoning", small) == "x"


@pytest.mark.parametrize("mutate", [
    lambda b: b[:-4] + ("AAAA" if not b.endswith("AAAA") else "BBBB"),  # payload altered
    lambda b: b[:len(sealmod.VERSION)] + "B" + b[len(sealmod.VERSION) + 1:],  # tag altered
    lambda b: "rpx1." + b[len(sealmod.VERSION):],  # another version
    lambda b: b + "!!",  # not base64
    lambda b: b[: len(sealmod.VERSION) + 8],  # truncated
])
def test_an_altered_blob_is_refused(mutate: object) -> None:
    blob = sealmod.seal("reasoning", "some reasoning text " * 4, SECRET)
    with pytest.raises(SealError):
        sealmod.open("reasoning", mutate(blob), SECRET, 1024)  # type: ignore[operator]


def test_a_blob_for_another_purpose_or_secret_is_refused() -> None:
    blob = sealmod.seal("compaction", "summary", SECRET)
    with pytest.raises(SealError):
        sealmod.open("reasoning", blob, SECRET, 1024)
    with pytest.raises(SealError):
        sealmod.open("compaction", blob, b"another-secret", 1024)
    with pytest.raises(SealError):
        sealmod.open("reasoning", "gAAAAB-someone-elses", SECRET, 1024)


def test_a_forged_blob_without_our_tag_is_refused() -> None:
    # The old `rpx1.` format: base64 of bare zlib, which any client could make.
    payload = zlib.compress(b"made up by the client")
    forged = sealmod.VERSION + base64.urlsafe_b64encode(b"\0" * 32 + payload).decode()
    with pytest.raises(SealError):
        sealmod.open("reasoning", forged, SECRET, 1024)


def _bomb() -> bytes:
    """~200 MB of zeros in ~200 KB of zlib (the size the issue measured)."""
    inflater = zlib.compressobj(9)
    chunk = b"\0" * (1 << 20)
    parts = [inflater.compress(chunk) for _ in range(200)]
    return b"".join(parts) + inflater.flush()


def test_a_zlib_bomb_is_refused_without_being_inflated(monkeypatch: pytest.MonkeyPatch) -> None:
    payload = _bomb()
    # Even with a genuine tag (as if we had sealed it), the bomb inflates only up to the cap.
    tag = sealmod._tag("reasoning", payload, SECRET)
    blob = sealmod.VERSION + base64.urlsafe_b64encode(tag + payload).decode()
    assert len(blob) > 250_000
    produced: list[int] = []
    real = zlib.decompressobj

    class Counting:
        def __init__(self) -> None:
            self._inner = real()

        def decompress(self, data: bytes, max_length: int = 0) -> bytes:
            out = self._inner.decompress(data, max_length)
            produced.append(len(out))
            return out

        def __getattr__(self, name: str) -> object:
            return getattr(self._inner, name)

    monkeypatch.setattr(sealmod.zlib, "decompressobj", Counting)
    with pytest.raises(SealError, match="larger than"):
        sealmod.open("reasoning", blob, SECRET, 64 * 1024)
    assert sum(produced) <= 64 * 1024 + 1
    # A forged bomb is refused before a single byte is inflated.
    produced.clear()
    forged = sealmod.VERSION + base64.urlsafe_b64encode(b"\1" * 32 + payload).decode()
    with pytest.raises(SealError):
        sealmod.open("reasoning", forged, SECRET, 64 * 1024)
    assert produced == []


def test_a_rotated_sealer_opens_old_blobs_and_seals_with_the_new_secret() -> None:
    old = Sealer((b"old",), 1024)
    rotating = Sealer((b"new", b"old"), 1024)
    assert rotating.open("reasoning", old.seal("reasoning", "before")) == "before"
    fresh = rotating.seal("reasoning", "after")
    assert Sealer((b"new",), 1024).open("reasoning", fresh) == "after"
    with pytest.raises(SealError):
        old.open("reasoning", fresh)


def test_verify_checks_the_seal_without_inflating_and_open_stops_at_the_cap() -> None:
    sealer = Sealer((SECRET,), 4096)
    genuine = sealer.seal("reasoning", "x" * 5000)  # ours, but past this sealer's cap
    sealer.verify("reasoning", genuine)  # authentic: accepted (stored sealed)
    with pytest.raises(SealTooLarge):
        sealer.open("reasoning", genuine)
    with pytest.raises(SealError):
        sealer.verify("reasoning", Sealer((b"other",), 4096).seal("reasoning", "x"))


def test_the_old_public_default_secret_opens_nothing() -> None:
    # The old public default secret, which any client could seal with: refused by any sealer of
    # ours.
    forged = sealmod.seal("reasoning", "trust me", b"responses-proxy-default-fleet-secret")
    with pytest.raises(SealError):
        Sealer((SECRET,), 1024).verify("reasoning", forged)


def test_a_sealer_without_its_secret_yet_is_unavailable_not_permissive() -> None:
    pending = Sealer((), 1024)
    assert not pending.ready
    for use in (lambda: pending.seal("reasoning", "x"),
                lambda: pending.verify("reasoning", "rpx2.AAAA"),
                lambda: pending.open("reasoning", "rpx2.AAAA")):
        with pytest.raises(StoreUnavailable):
            use()
    pending.secrets = (SECRET,)
    assert pending.open("reasoning", pending.seal("reasoning", "now")) == "now"
    with pytest.raises(ValueError):
        Sealer((b"",), 1024)
