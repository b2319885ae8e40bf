"""Key layout of the Redis store (layout ``redis-2``): names, hash tags, fixed-width bytes.

Pure: no Redis client here, so the layout can be read and tested on its own.

Every key starts with the crawl's prefix (``DEDUP_REDIS_PREFIX``, by default
``dedup:<spider name>``), so several crawls share one server, and carries a
``{hash tag}``: Redis Cluster puts keys with the same tag in the same slot. Each
server-side function (``redis_functions.lua``) touches the keys of one tag only,
so no call is CROSSSLOT, and the tags are chosen so that the work spreads:

=============================  =====================================  =====================
key                            holds                                  slots
=============================  =====================================  =====================
``P:f:{f<bucket>}``            frontier bucket: 8-byte records        16,384 buckets, spread
                               (6-byte URL-key digest, uint16 run)
``P:x:{x<shard>}``             exact index: 16-byte content digest    4,096 shards, spread
                               -> 8-byte cluster id (hash)
``P:n:{n<t><scope><block>}``   SimHash table ``t`` bucket of one      4 x 65,536 per scope,
``P:np:{n<t><scope><block>}``  16-bit block: settled / pending        spread; a decision
                               16-byte records (SimHash, token)       calls 4 of them
``P:o:{P:o}``, ``P:om:{P:o}``  order counter, decisions in flight     one slot: one INCR and
                                                                      one HSET per decision
``P:c:{c<cluster id>}``        one cluster: representative and       one per cluster, spread
                               member ranks (hash)
``P:q:{q<shard>}``,            requests owed, by the process that     64 shards, spread
``P:qz:{q<shard>}``            holds them (hash), lease deadlines
``P:d:{d<url key digest>}``    a URL key being decided: its holder    one per document in
                               (string with an expiry)                flight, spread
``P:b:{b<g>-<k>}[<scope>:]``   LSH band ``<band>``, bucket            8 slot groups of 4
``<band><bucket>``,            ``<bucket>`` (14 bits of the band      bands, evenly spaced;
``P:bp:...``                   hash): settled / pending 16-byte       a decision calls each
                               records (band hash, token)             group once per step
=============================  =====================================  =====================

The frontier needs no per-URL key: 2^14 buckets of packed 8-byte records cost
about 8-12 bytes per URL plus a fixed ~1.5 MB for the buckets, against 88 bytes
per URL for a set of 40-character fingerprints (scrapy-redis's dupefilter).

Why near-duplicate decisions spread: a decision enters its SimHash in the four
tables it belongs to (four slots), takes one order number (the only shared
slot, and a cheap call), then scans the same four buckets. No bucket is locked
while another is read; see :mod:`scrapy_dedup.store.redis_near` for why two
near duplicates are never both kept.
"""

from __future__ import annotations

import binascii
import functools
import re
import struct
from collections.abc import Sequence

import xxhash

from scrapy_dedup.core.bands import BANDS, BLOCK_BITS, BLOCKS
from scrapy_dedup.core.representative import Candidate, authority_rank

LAYOUT = "redis-2"

FRONTIER_BUCKET_BITS = 14
FRONTIER_RECORD = 8
EXACT_SHARD_BITS = 12
PENDING_SHARDS = 64
NEAR_RECORD = 16

_PREFIX_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")
_U64 = struct.Struct(">Q")
_BLOCK_MASK = (1 << BLOCK_BITS) - 1


class BadPrefix(ValueError):
    pass


def check_prefix(prefix: str) -> str:
    """A key prefix: letters, digits and ``_ . : -`` (no braces, which would change the slots).

    >>> check_prefix("dedup:docs")
    'dedup:docs'
    >>> check_prefix("a{b}")
    Traceback (most recent call last):
    ...
    scrapy_dedup.store.redis_keys.BadPrefix: a Redis key prefix is 1-100 characters among letters, digits and _ . : - (got 'a{b}')
    """
    if not isinstance(prefix, str) or not _PREFIX_RE.fullmatch(prefix):
        raise BadPrefix(
            f"a Redis key prefix is 1-100 characters among letters, digits and _ . : - (got {prefix!r})"
        )
    return prefix


def default_prefix(spider_name: str) -> str:
    """``dedup:<spider name>``, with characters a prefix cannot hold replaced by ``_``.

    >>> default_prefix("docs")
    'dedup:docs'
    >>> default_prefix("my spider{1}")
    'dedup:my_spider_1_'
    """
    return "dedup:" + re.sub(r"[^A-Za-z0-9_.\-]", "_", spider_name or "crawl")[:90]


# -- frontier -------------------------------------------------------------------------------


def url_digest(url_key: str) -> int:
    """64-bit digest of a URL key (xxh3): 14 bits choose the bucket, 48 are stored."""
    return xxhash.xxh3_64_intdigest(url_key.encode("utf-8", "surrogatepass"))


def frontier_slot(prefix: str, url_key: str) -> tuple[str, bytes]:
    """(bucket key, 6-byte record id) of ``url_key``.

    Two keys collide only if their 62 bits used here are equal: at 10^7 URLs the
    chance of any collision in a crawl is about 10^-5.

    >>> key, rid = frontier_slot("dedup:docs", "https://example.com/a")
    >>> key.startswith("dedup:docs:f:{f") and key.endswith("}") and len(rid) == 6
    True
    """
    digest = url_digest(url_key)
    bucket = digest >> (64 - FRONTIER_BUCKET_BITS)
    return frontier_bucket(prefix, bucket), _U64.pack(digest)[2:]


def frontier_bucket(prefix: str, bucket: int) -> str:
    return f"{prefix}:f:{{f{bucket:04x}}}"


def frontier_pattern(prefix: str) -> str:
    """SCAN pattern of every frontier bucket."""
    return f"{_glob_escape(prefix)}:f:*"


# -- exact index ----------------------------------------------------------------------------


def scope_digest(scope: str) -> bytes:
    """8 bytes standing for a dedup scope (the same digest as the LevelDB backend's)."""
    return xxhash.xxh64_digest(scope.encode("utf-8"))


def exact_slot(prefix: str, scope: str, content_hash: str) -> tuple[str, bytes]:
    """(shard key, 16-byte field) of a content hash in a scope."""
    field = xxhash.xxh3_128_digest(scope_digest(scope) + content_hash.encode("ascii", "surrogateescape"))
    shard = int.from_bytes(field[:2], "big") >> (16 - EXACT_SHARD_BITS)
    return f"{prefix}:x:{{x{shard:03x}}}", field


def cluster_token(cluster_id: str) -> bytes:
    """A cluster id (16 hex digits) as the 8 bytes stored in tables."""
    return bytes.fromhex(cluster_id)


# -- near-duplicate tables ------------------------------------------------------------------


def near_buckets(prefix: str, scope: str, simhash: int) -> list[tuple[str, str]]:
    """(settled key, pending key) of the BLOCKS buckets a SimHash belongs to.

    >>> [k for k, _ in near_buckets("p", "", 0x0123_4567_89AB_CDEF)][0].endswith("cdef}")
    True
    """
    sid = scope_digest(scope).hex()
    out = []
    for table in range(BLOCKS):
        block = (simhash >> (BLOCK_BITS * table)) & _BLOCK_MASK
        tag = f"n{table}{sid}{block:04x}"
        out.append((f"{prefix}:n:{{{tag}}}", f"{prefix}:np:{{{tag}}}"))
    return out


def near_pattern(prefix: str) -> str:
    return f"{_glob_escape(prefix)}:n:*"


def simhash_bytes(simhash: int) -> bytes:
    return _U64.pack(simhash)


def near_record(simhash: int, token: bytes) -> bytes:
    if len(token) != 8:
        raise ValueError("a near-duplicate token is 8 bytes")
    return _U64.pack(simhash) + token


def split_near_record(record: bytes) -> tuple[int, bytes]:
    return _U64.unpack(record[:8])[0], record[8:16]


def order_keys(prefix: str) -> tuple[str, str]:
    tag = f"{{{prefix}:o}}"
    return f"{prefix}:o:{tag}", f"{prefix}:om:{tag}"


# -- clusters and their representatives -----------------------------------------------------


def cluster_key(prefix: str, cluster_id: str) -> str:
    return f"{prefix}:c:{{c{cluster_id}}}"


def rank_bytes(candidate: Candidate, authority: Sequence[str] = ()) -> bytes:
    """Bytes whose order is :func:`representative_order`'s: the smallest represents.

    Fixed-width big-endian numbers first, then the URL key in UTF-8 (whose byte order is
    code point order), so the server compares ranks without knowing the rule.
    """
    length = max(0, min(candidate.text_length, 0xFFFFFFFF))
    return (
        bytes((1 if candidate.canonical_alias else 0,))
        + struct.pack(
            ">IHI",
            0xFFFFFFFF - length,
            min(authority_rank(candidate.url, authority), 0xFFFF),
            max(0, min(candidate.first_run, 0xFFFFFFFF)),
        )
        + candidate.key.encode("utf-8", "surrogatepass")
    )


# -- requests taken by a process ------------------------------------------------------------


def pending_keys(prefix: str, request_id: str) -> tuple[str, str]:
    shard = xxhash.xxh3_64_intdigest(request_id.encode("utf-8", "surrogatepass")) % PENDING_SHARDS
    return pending_shard(prefix, shard)


def pending_shard(prefix: str, shard: int) -> tuple[str, str]:
    tag = f"{{q{shard:02x}}}"
    return f"{prefix}:q:{tag}", f"{prefix}:qz:{tag}"


# -- a document being decided ---------------------------------------------------------------


def decision_key(prefix: str, url_key: str) -> str:
    """The lock of one URL key while a process decides its document."""
    digest = xxhash.xxh64_hexdigest(url_key.encode("utf-8", "surrogatepass"))
    return f"{prefix}:d:{{d{digest}}}"


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


# -- LSH band buckets -----------------------------------------------------------------------
#
# A document's 32 band hashes go to 32 buckets, one per band, named by (scope, band, top
# BAND_BUCKET_BITS bits of the band hash). The {hash tag} names only the band group: the
# BAND_GROUPS groups of BANDS // BAND_GROUPS consecutive bands are BAND_GROUPS slots, so one
# call per group carries all of a document's records in it (8 calls per step instead of 32).
# Each group's tag is chosen so that its slot lies near the middle of its own 1/8 of the
# 16,384 slots: a cluster whose masters own equal contiguous slot ranges (as
# ``redis-cli --cluster create`` makes) shares the band work as evenly as 8 slots can
# (2 masters: 4 + 4 groups; 3 masters: 3 + 2 + 3; 4 masters: 2 each). The scope is in the key
# name, outside the tag. Fewer groups would mean fewer calls per page but a coarser spread
# over the masters (with 4, one of 3 masters would carry half of the band work); more groups,
# more calls.
#
# A bucket is a string of 16-byte records (8-byte band hash, 8-byte cluster or decision
# token). 14 bits give 16,384 buckets per band, 524,288 per scope: at 10^6 representatives a
# bucket holds about 61 records (1 KB), at 10^7 about 610 (9.8 KB). A call reads its buckets
# whole into the function, so the server time grows with them (bench_redis.py, one group's
# 4 buckets: 25 us at 10^6 and 85 us at 10^7 documents with 14 bits, 43 and 333 us with 12,
# 18 and 33 us with 16), while each key costs about 110 bytes of its own: at 10^5 random
# documents the band buckets take 986 bytes per document with 14 bits, 664 with 12 and
# 2,470 with the previous layout's 16 (a key per band per document up to there).

BAND_GROUPS = 8
BAND_BUCKET_BITS = 14
_SLOTS = 16384
_BAND_SLOT_SPREAD = 256  # a group's slot is within this many slots of its range's middle


def _slot(tag: str) -> int:
    """The Redis Cluster slot of a hash tag (CRC16/XMODEM modulo 16,384)."""
    return binascii.crc_hqx(tag.encode("ascii"), 0) % _SLOTS


def band_group(band: int) -> int:
    """The slot group of a band: bands 0-3 are group 0, 4-7 group 1, ...

    >>> [band_group(b) for b in (0, 3, 4, 31)]
    [0, 0, 1, 7]
    """
    return band // (BANDS // BAND_GROUPS)


@functools.cache
def band_tags() -> tuple[str, ...]:
    """The hash tag of each band group, ``b<group>-<k>``: ``k`` is the smallest number that
    puts the tag's slot within 256 slots of the middle of the group's 1/8 of the slots.

    >>> tags = band_tags()
    >>> len(tags), [_slot(t) * BAND_GROUPS // _SLOTS for t in tags]
    (8, [0, 1, 2, 3, 4, 5, 6, 7])
    """
    width = _SLOTS // BAND_GROUPS
    tags = []
    for group in range(BAND_GROUPS):
        middle = group * width + width // 2
        k = 0
        while abs(_slot(f"b{group}-{k}") - middle) >= _BAND_SLOT_SPREAD:
            k += 1
        tags.append(f"b{group}-{k}")
    return tuple(tags)


def band_scope_id(scope: str) -> str:
    """How a band bucket's name spells its scope: nothing for the default scope (most keys,
    whose names are then 17 bytes shorter), else :func:`scope_digest` in hex and ``:``."""
    return scope_digest(scope).hex() + ":" if scope else ""


def band_bucket(prefix: str, scope_id: str, band: int, band_hash: int, kind: str = "b") -> str:
    """The bucket of ``band_hash`` in ``band`` (``scope_id``: :func:`band_scope_id`): two hex
    digits of band, four of bucket. ``kind`` ``b`` holds representatives (settled), ``bp``
    decisions in flight (same slot).

    >>> band_bucket("p", band_scope_id(""), 4, 0xABC0_0000_0000_0000)
    'p:b:{b1-43}042af0'
    >>> band_bucket("p", band_scope_id("intranet"), 4, 0xABC0_0000_0000_0000).endswith(":042af0")
    True
    """
    tag = band_tags()[band_group(band)]
    return f"{prefix}:{kind}:{{{tag}}}{scope_id}{band:02x}{band_hash >> (64 - BAND_BUCKET_BITS):04x}"


def band_calls(
    prefix: str, scope: str, bands: Sequence[int], kinds: Sequence[str] = ("b",)
) -> list[tuple[list[str], list[bytes]]]:
    """Per band group, (keys, 8-byte band hashes): the bucket of each band of the group in
    each of ``kinds``, in that order, and the band hash looked up or entered there. One
    call to a band function per group, on one slot.

    >>> calls = band_calls("p", "", list(range(32)), ("b", "bp"))
    >>> len(calls), len(calls[0][0]), calls[0][0][4].startswith("p:bp:")
    (8, 8, True)
    """
    sid = band_scope_id(scope)
    groups: dict[int, tuple[list[str], list[bytes]]] = {}
    for kind in kinds:
        for band, band_hash in enumerate(bands):
            keys, hashes = groups.setdefault(band_group(band), ([], []))
            keys.append(band_bucket(prefix, sid, band, band_hash, kind))
            hashes.append(_U64.pack(band_hash))
    return [groups[g] for g in sorted(groups)]
