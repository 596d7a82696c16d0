"""`UploadSlots` (services/files/files.py): the process's uploads in flight, and one key's share
of them (half, rounded up), each given back however the upload ends."""

from __future__ import annotations

import contextlib

import pytest

from proxy.core.errors import RateLimited
from proxy.services.files.files import UploadSlots


def test_one_key_holds_at_most_half_the_slots_and_the_others_keep_the_rest() -> None:
    slots = UploadSlots(8)
    with contextlib.ExitStack() as held:
        for _ in range(4):
            held.enter_context(slots.held("a"))
        with pytest.raises(RateLimited, match=r"share \(4 at once\)"):
            held.enter_context(slots.held("a"))
        for _ in range(4):
            held.enter_context(slots.held("b"))
        with pytest.raises(RateLimited, match="receiving 8 uploads already"):
            held.enter_context(slots.held("c"))
        assert slots.used == 8
    assert slots.used == 0
    with slots.held("a"):  # all given back
        assert slots.used == 1


@pytest.mark.parametrize(("limit", "share"), [(1, 1), (2, 1), (3, 2), (8, 4)])
def test_the_share_is_half_rounded_up_and_never_none(limit: int, share: int) -> None:
    assert UploadSlots(limit).per_key == share


def test_a_slot_is_given_back_when_the_upload_fails() -> None:
    slots = UploadSlots(2)
    with pytest.raises(ValueError), slots.held("a"):
        raise ValueError("the body was bad")
    assert slots.used == 0
    with slots.held("a"):
        pass
