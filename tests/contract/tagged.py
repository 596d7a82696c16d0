"""Ids for the contract suites. On a Redis Cluster the store holds shard-tagged ids only
(core/shardtags.py: an untagged one's scripts would span slots), so there `rid("1")` is
`resp_<tag>_1`, the tag a function of the name (different names spread over several tags, the
same name is always the same id); on the other topologies it is `resp_1`, today's layout. The
`store` fixture (conftest.py) sets which, for the test it serves."""

from __future__ import annotations

import binascii
from dataclasses import dataclass

from proxy.core.shardtags import TAGS


@dataclass
class IdStyle:
    tagged: bool = False


STYLE = IdStyle()


def _tag(name: str) -> str:
    return TAGS[binascii.crc32(name.encode()) % len(TAGS)]


def rid(name: object, *, like: object = None) -> str:
    """A response id (with the tag `rid(like)` has, when given)."""
    tag = _tag(str(name if like is None else like))
    return f"resp_{tag}_{name}" if STYLE.tagged else f"resp_{name}"


def cid(name: object) -> str:
    """A conversation id."""
    return f"conv_{_tag(str(name))}_{name}" if STYLE.tagged else f"conv_{name}"
