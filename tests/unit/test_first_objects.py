"""store/lua/references.py `FirstObjects`: the create-time objects a process keeps until their
final write, bounded in count and in bytes (an object carries the request's instructions)."""

from __future__ import annotations

from proxy.store.lua.references import FirstObjects


def test_objects_are_kept_until_forgotten() -> None:
    firsts = FirstObjects(bound=4, max_bytes=100)
    firsts.remember("a", b"x" * 10)
    assert firsts.get("a") == b"x" * 10
    firsts.forget("a")
    assert firsts.get("a") is None


def test_the_bytes_held_never_pass_the_bound() -> None:
    firsts = FirstObjects(bound=1000, max_bytes=100)
    for n in range(50):
        firsts.remember(f"r{n}", b"x" * 30)
        held = sum(len(firsts.get(f"r{m}") or b"") for m in range(n + 1))
        assert held <= 100
    assert firsts.get("r49") == b"x" * 30  # the newest is kept
    firsts.remember("big", b"x" * 101)  # one bigger than the bound is never kept
    assert firsts.get("big") is None


def test_the_count_never_passes_the_bound() -> None:
    firsts = FirstObjects(bound=3, max_bytes=10_000)
    for n in range(10):
        firsts.remember(f"r{n}", b"o")
    assert sum(firsts.get(f"r{n}") is not None for n in range(10)) <= 3


def test_remembering_an_id_again_counts_its_bytes_once() -> None:
    firsts = FirstObjects(bound=10, max_bytes=100)
    for _ in range(10):
        firsts.remember("same", b"x" * 40)
    firsts.remember("other", b"y" * 40)
    assert firsts.get("same") == b"x" * 40 and firsts.get("other") == b"y" * 40


def test_what_the_create_made_is_kept_with_its_object() -> None:
    # The final write declares the create's keys again rather than formatting them again.
    firsts = FirstObjects(bound=4, max_bytes=100)
    firsts.remember("a", b"x" * 10, "tenant", "t1", ("rp:{t1}a", "rp:{t1}a:in"))
    first = firsts.first("a")
    assert first is not None
    assert (first.obj, first.tenant, first.tag, first.keys) == (
        b"x" * 10, "tenant", "t1", ("rp:{t1}a", "rp:{t1}a:in"))
    firsts.forget("a")
    assert firsts.first("a") is None and firsts.get("a") is None


def test_a_begun_head_keeps_the_keys_and_frees_the_object() -> None:
    """A flush carried the response's event 0 (its reply maybe lost): the final write keeps
    its head inline, so the object is dropped (its bytes no longer held) and the keys kept."""
    firsts = FirstObjects(bound=10, max_bytes=100)
    firsts.remember("a", b"x" * 60, "tenant", "tag", ("k1", "k2"))
    firsts.began("a")
    first = firsts.first("a")
    assert first is not None and first.obj == b"" and first.keys == ("k1", "k2")
    assert firsts.get("a") is None
    firsts.remember("b", b"y" * 90)  # fits: a's 60 bytes are no longer held
    assert firsts.get("b") == b"y" * 90 and firsts.first("a") is not None
    firsts.began("unknown")  # nothing remembered: nothing to do
    firsts.forget("a")
    firsts.remember("c", b"z" * 10)  # 90 + 10: within the bound, nothing cleared
    assert firsts.get("b") == b"y" * 90
