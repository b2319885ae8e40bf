"""Key layout of the Redis store (layout ``redis-7``): names, hash tags, fixed-width bytes.

Pure: no Redis client here, so the layout can be read and tested on its own. Every key starts
with the crawl's prefix (``DEDUP_REDIS_PREFIX``) and carries a ``{hash tag}``; each server-side
function touches the keys of one tag only, so no call is CROSSSLOT on a cluster. The table of
keys, and why they are laid out so, is in the manual (How it works: The Redis store).
"""

from __future__ import annotations

import binascii
import functools
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import xxhash

from scrapy_dedup.core.bands import BANDS, BLOCK_BITS, BLOCKS
from scrapy_dedup.store.base import CLUSTER, EMITTED, EXACT, MINHASH, RAW, TEXT

LAYOUT = "redis-7"

FRONTIER_BUCKET_BITS = 14
FRONTIER_RECORD = 8
PENDING_SHARDS = 64
LOCK_SHARDS = 64
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
    scrapy_dedup.store.redis.keys.BadPrefix: a Redis key prefix is 1-100 characters among letters, digits and _ . : - (got 'a{b}')
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


def frontier_slot(prefix: str, url_key: str) -> tuple[str, bytes]:
    """(bucket key, 6-byte record id) of ``url_key``: of its 64-bit xxh3, 14 bits choose the
    bucket, 48 are stored.

    Two keys collide only if their 62 bits used here are equal: at 10^7 URLs the
    chance of any collision in a crawl is about 10^-5.

    >>> key, rid = frontier_slot("dedup:docs", "https://example.com/a")
    >>> key.startswith("dedup:docs:f:{f") and key.endswith("}") and len(rid) == 6
    True
    """
    digest = xxhash.xxh3_64_intdigest(url_key.encode("utf-8", "surrogatepass"))
    bucket = digest >> (64 - FRONTIER_BUCKET_BITS)
    return f"{prefix}:f:{{f{bucket:04x}}}", _U64.pack(digest)[2:]


def frontier_pattern(prefix: str) -> str:
    """SCAN pattern of every frontier bucket (a prefix holds no glob character)."""
    return f"{prefix}:f:*"


# -- scopes and cluster tokens ----------------------------------------------------------------


def scope_digest(scope: str) -> bytes:
    """8 bytes standing for a dedup scope (the same digest as the LevelDB backend's)."""
    return xxhash.xxh64_digest(scope.encode("utf-8"))


# -- record tables --------------------------------------------------------------------------
#
# A table is sharded over hashes ``P:t:<table>:{t<table><shard>}`` by the xxh3 of the record's
# key. Where a key is only looked up, its field is a 12-byte digest (such a table is never
# scanned; two of 10^8 keys share a digest with a chance of about 10^-13), and tables of small
# records have more shards, so that each hash stays a compact listpack; MinHash signatures are
# packed several to a field. The manual gives the sizes behind these choices.

TABLE_SHARDS = 1024
SMALL_TABLE_SHARDS = 16_384
_HEX_ID = re.compile(r"[0-9a-f]{16}")
_HEX_HASH = re.compile(r"[0-9a-f]{32}")


def _id_bytes(cluster_id: str | bytes) -> bytes:
    """A cluster id, 16 lowercase hex digits, as its 8 bytes."""
    text = cluster_id.decode("ascii", "replace") if isinstance(cluster_id, bytes) else cluster_id
    if not _HEX_ID.fullmatch(text):
        raise ValueError(f"a cluster id is 16 lowercase hex digits (got {text!r})")
    return bytes.fromhex(text)


def _hash_bytes(value: bytes) -> bytes:
    """A content hash, 32 lowercase hex digits, as its 16 bytes."""
    text = value.decode("ascii", "replace")
    if not _HEX_HASH.fullmatch(text):
        raise ValueError(f"a content hash is 32 lowercase hex digits (got {text!r})")
    return bytes.fromhex(text)


#: bytes of a key's digest where a table keeps digests instead of keys
KEY_DIGEST_BYTES = 12
#: fields of one shard of a packed table (the first byte of its field)
PACKED_FIELDS = 64


def _key_digest(key: str) -> bytes:
    return xxhash.xxh3_128_digest(key.encode("utf-8", "surrogatepass"))[:KEY_DIGEST_BYTES]


def _packed_field(key: str) -> bytes:
    """The field of a packed record (1 byte) then its key's digest."""
    digest = xxhash.xxh3_128_digest(key.encode("utf-8", "surrogatepass"))
    return bytes((digest[-1] % PACKED_FIELDS,)) + digest[:KEY_DIGEST_BYTES]


def _same(value: bytes) -> bytes:
    return value


def _hex_out(raw: bytes) -> bytes:
    return raw.hex().encode("ascii")


@dataclass(frozen=True)
class TableLayout:
    """How one table's records are stored: its shards, a key's field, a value's bytes."""

    shards: int
    field: Callable[[str], bytes] = lambda key: key.encode("utf-8", "surrogatepass")
    #: a field's key back, for a scan; None: the field is a digest and the table is not scanned
    key: Callable[[bytes], str] | None = lambda field: field.decode("utf-8", "surrogatepass")
    stored: Callable[[bytes], bytes] = _same  # a value as stored
    read: Callable[[bytes], bytes] = _same  # a stored value as given
    #: several records to a field: ``field`` gives the field (1 byte) then the record's digest,
    #: and the records are read and written by the ``sdd_packed_*`` functions
    packed: bool = False

    def shard(self, key: str) -> int:
        return xxhash.xxh3_64_intdigest(key.encode("utf-8", "surrogatepass")) % self.shards

    def get_command(self, shard: str, field: bytes) -> tuple:
        """The command that reads a record (its reply: the stored value, or None)."""
        if self.packed:
            return ("FCALL_RO", "sdd_packed_get", 1, shard, field[:1], field[1:])
        return ("HGET", shard, field)

    def put_command(self, shard: str, field: bytes, value: bytes) -> tuple:
        """The command that writes a record (``value`` as given: it is stored as ``stored`` says)."""
        if self.packed:
            return ("FCALL", "sdd_packed_put", 1, shard, field[:1], field[1:], self.stored(value))
        return ("HSET", shard, field, self.stored(value))

    def delete_command(self, shard: str, field: bytes) -> tuple:
        """The command that takes a record out."""
        if self.packed:
            return ("FCALL", "sdd_packed_delete", 1, shard, field[:1], field[1:])
        return ("HDEL", shard, field)


PLAIN_TABLE = TableLayout(TABLE_SHARDS)
TABLES: dict[str, TableLayout] = {
    CLUSTER: TableLayout(TABLE_SHARDS, field=_id_bytes, key=lambda field: field.hex()),
    EXACT: TableLayout(SMALL_TABLE_SHARDS, field=_key_digest, key=None, stored=_id_bytes, read=_hex_out),
    RAW: TableLayout(SMALL_TABLE_SHARDS, field=_key_digest, key=None),
    EMITTED: TableLayout(SMALL_TABLE_SHARDS, field=_key_digest, key=None, stored=_hash_bytes, read=_hex_out),
    MINHASH: TableLayout(TABLE_SHARDS, field=_packed_field, key=None, packed=True),
    TEXT: TableLayout(TABLE_SHARDS, field=_key_digest, key=None),
}


def table_layout(table: str) -> TableLayout:
    return TABLES.get(table, PLAIN_TABLE)


def table_shard(prefix: str, table: str, shard: int) -> str:
    """The hash of one shard of a table (shard in hex, 3 digits for 1,024 shards, 4 for 16,384).

    >>> table_shard("p", "url", 5), table_shard("p", "exact", 5)
    ('p:t:url:{turl005}', 'p:t:exact:{texact0005}')
    """
    width = 3 if table_layout(table).shards <= 4096 else 4
    return f"{prefix}:t:{table}:{{t{table}{shard:0{width}x}}}"


def table_slot(prefix: str, table: str, key: str) -> tuple[str, bytes]:
    """(shard hash, field) of ``key`` in ``table``.

    >>> table_slot("p", "cluster", "00000000000000aa")[1].hex(), len(table_slot("p", "exact", "0" * 16 + ":a")[1])
    ('00000000000000aa', 12)
    >>> len(table_slot("p", "minhash", "http://h/a")[1])  # the field, then the digest
    13
    >>> table_slot("p", "url", "http://h/a")
    ('p:t:url:{turl008}', b'http://h/a')
    """
    layout = table_layout(table)
    return table_shard(prefix, table, layout.shard(key)), layout.field(key)


# -- near-duplicate tables ------------------------------------------------------------------


#: a table's buckets fall in 2**NEAR_GROUP_BITS slot groups by the top bits of their block
NEAR_GROUP_BITS = 4
CLUSTER_SLOTS = 16384


def key_slot(tag: str) -> int:
    """The Redis Cluster slot of a hash tag (CRC16/XMODEM modulo 16,384)."""
    return binascii.crc_hqx(tag.encode("ascii"), 0) % CLUSTER_SLOTS


@functools.cache
def near_group_tags() -> tuple[tuple[str, ...], ...]:
    """``tags[table][group]``: the hash tag of one slot group, ``n<table><group>-<k>``.

    Group ``g`` of table ``t`` is window ``4g + t`` of 64 equal windows over the slots;
    ``k`` is the smallest number that puts the tag's slot in it.

    >>> tags = near_group_tags()
    >>> len(tags), len(tags[0]), tags[0][0]
    (4, 16, 'n00-79')
    >>> sorted(key_slot(tag) // 256 for row in tags for tag in row) == list(range(64))
    True
    """
    groups = 1 << NEAR_GROUP_BITS
    width = CLUSTER_SLOTS // (groups * BLOCKS)
    tags = []
    for table in range(BLOCKS):
        row = []
        for group in range(groups):
            window = group * BLOCKS + table
            k = 0
            while key_slot(f"n{table}{group:x}-{k}") // width != window:
                k += 1
            row.append(f"n{table}{group:x}-{k}")
        tags.append(tuple(row))
    return tuple(tags)


def near_group_of(table: int, block: int) -> int:
    """The slot group of a block in its table, 0-15 (its top bits)."""
    return block >> (BLOCK_BITS - NEAR_GROUP_BITS)


def near_group(prefix: str, scope_id: str, table: int, group: int) -> str:
    """The hash of one slot group of a table: ``scope_id`` is :func:`scope_digest` in hex.

    >>> near_group("p", "00" * 8, 0, 0xc)
    'p:n:{n0c-23}0000000000000000'
    """
    return f"{prefix}:n:{{{near_group_tags()[table][group]}}}{scope_id}"


def near_block(simhash: int, table: int) -> int:
    return (simhash >> (BLOCK_BITS * table)) & _BLOCK_MASK


def near_buckets(prefix: str, scope: str, simhash: int) -> list[str]:
    """The hashes of the groups holding the BLOCKS buckets of a SimHash, table by table; the
    server-side functions find the bucket in each from the SimHash.

    >>> near_buckets("p", "", 0x0123_4567_89AB_CDEF)[0].startswith("p:n:{n0c-")
    True
    """
    sid = scope_digest(scope).hex()
    return [
        near_group(prefix, sid, table, near_group_of(table, near_block(simhash, table)))
        for table in range(BLOCKS)
    ]


def records_near(data: bytes, simhash: int, max_distance: int) -> set[tuple[int, bytes]]:
    """The (SimHash, token) records of ``data``, the buckets of ``simhash`` read together, within
    ``max_distance`` bits of it (a record shares a bucket in each table its block is the same in:
    it is one record however often it comes).

    >>> a, b = near_record(0x0001, b"a" * 8), near_record(0x00F0, b"b" * 8)
    >>> records_near(a + b + a, 0x0003, 1)
    {(1, b'aaaaaaaa')}
    """
    if len(data) % NEAR_RECORD:
        raise ValueError("a near-duplicate bucket's length is not a multiple of 16 bytes")
    fps = np.frombuffer(data, dtype=">u8")[::2].astype(np.uint64)
    close = np.flatnonzero(np.bitwise_count(fps ^ np.uint64(simhash)) <= max_distance).tolist()
    return {(int(fps[r]), data[NEAR_RECORD * r + 8 : NEAR_RECORD * (r + 1)]) for r in close}


def simhash_bytes(simhash: int) -> bytes:
    return _U64.pack(simhash)


def near_record(simhash: int, token: bytes) -> bytes:
    if len(token) != 8:
        raise ValueError("a near-duplicate token is 8 bytes")
    return _U64.pack(simhash) + token


# -- requests taken by a process ------------------------------------------------------------


def pending_key(prefix: str, request_id: str) -> str:
    """The shard that keeps an owed request."""
    return pending_shard(prefix, xxhash.xxh3_64_intdigest(request_id.encode("utf-8", "surrogatepass")) % PENDING_SHARDS)


def pending_shard(prefix: str, shard: int) -> str:
    return f"{prefix}:q:{{q{shard:02x}}}"


# -- a document being decided ---------------------------------------------------------------


def decision_slot(prefix: str, url_key: str) -> tuple[str, bytes]:
    """(shard, field) of one URL key's lock while a process decides its document."""
    digest = xxhash.xxh64_intdigest(url_key.encode("utf-8", "surrogatepass"))
    return decision_shard(prefix, digest % LOCK_SHARDS), _U64.pack(digest)


def decision_shard(prefix: str, shard: int) -> str:
    return f"{prefix}:d:{{d{shard:02x}}}"


# -- LSH band buckets -----------------------------------------------------------------------
#
# A document's 32 band hashes go to 32 buckets, one per band, named by (band, top
# BAND_BUCKET_BITS bits of the band hash). The bands fall in BAND_GROUPS groups of 4, each one
# hash per scope (``P:b:{<tag>}<scope>``, a field per bucket) whose slot lies near the middle of
# its own 1/8 of the slots, so one call per group reads or writes a document's buckets in it and
# the groups spread over a cluster's masters. A bucket's records (BAND_RECORD) keep a band hash's
# tag only: a candidate that shares the tag alone is turned down by near_match, as any candidate.

BAND_GROUPS = 8
BAND_BUCKET_BITS = 14
BAND_FIELD = 3  # a bucket's field: band, then bucket (big-endian)
BAND_TAG = 4  # what a band record keeps of its band hash: the low 4 bytes
BAND_ENTRY = BAND_FIELD + BAND_TAG  # a band's field, then its tag
BAND_RECORD = BAND_TAG + 8  # a bucket's record: the tag and an 8-byte cluster token
_TAG_MASK = (1 << (8 * BAND_TAG)) - 1
_BAND_SLOT_SPREAD = 256  # a group's slot is within this many slots of its range's middle


@functools.cache
def band_tags() -> tuple[str, ...]:
    """The hash tag of each band group, ``b<group>-<k>``: ``k`` is the smallest number that
    puts the tag's slot within 256 slots of the middle of the group's 1/8 of the slots.

    >>> tags = band_tags()
    >>> len(tags), [key_slot(t) * BAND_GROUPS // CLUSTER_SLOTS for t in tags]
    (8, [0, 1, 2, 3, 4, 5, 6, 7])
    """
    width = CLUSTER_SLOTS // BAND_GROUPS
    tags = []
    for group in range(BAND_GROUPS):
        middle = group * width + width // 2
        k = 0
        while abs(key_slot(f"b{group}-{k}") - middle) >= _BAND_SLOT_SPREAD:
            k += 1
        tags.append(f"b{group}-{k}")
    return tuple(tags)


def band_hash_key(prefix: str, scope_id: str, group: int) -> str:
    """The hash of one band group's buckets (``scope_id``: :func:`scope_digest` in hex).

    >>> band_hash_key("p", "00" * 8, 1)
    'p:b:{b1-43}0000000000000000'
    """
    return f"{prefix}:b:{{{band_tags()[group]}}}{scope_id}"


def band_field(band: int, band_hash: int) -> bytes:
    """The field of the bucket of ``band_hash`` in ``band``: the band, then the top
    BAND_BUCKET_BITS bits of the band hash (2 bytes).

    >>> band_field(4, 0xABC0_0000_0000_0000).hex()
    '042af0'
    """
    return bytes((band,)) + (band_hash >> (64 - BAND_BUCKET_BITS)).to_bytes(2, "big")


_BAND_ENTRY = struct.Struct(">BHI")  # band, bucket, tag: a field and its band tag


def band_entry(band: int, band_hash: int) -> bytes:
    """A band's entry in a band call: its field (:func:`band_field`), then its tag, the band
    hash's low BAND_TAG bytes.

    >>> band_entry(4, 0xABC0_0000_1234_5678) == band_field(4, 0xABC0_0000_1234_5678) + bytes.fromhex("12345678")
    True
    """
    return _BAND_ENTRY.pack(band, band_hash >> (64 - BAND_BUCKET_BITS), band_hash & _TAG_MASK)


@functools.lru_cache(maxsize=256)
def _band_hashes(prefix: str, scope: str) -> tuple[str, ...]:
    sid = scope_digest(scope).hex()
    return tuple(band_hash_key(prefix, sid, group) for group in range(BAND_GROUPS))


def band_calls(prefix: str, scope: str, bands: Sequence[int]) -> list[tuple[str, bytes]]:
    """Per band group, (its hash, entries): per band of the group its field and its tag (the
    band hash's low 4 bytes), concatenated (BAND_ENTRY bytes each). One call to a band
    function per group, on one slot.

    >>> calls = band_calls("p", "", list(range(32)))
    >>> len(calls), calls[0][0].startswith("p:b:"), len(calls[0][1])
    (8, True, 28)
    >>> calls[1][1][:BAND_ENTRY] == band_field(4, 4) + (4).to_bytes(4, "big")
    True
    """
    hashes = _band_hashes(prefix, scope)
    entries = b"".join([band_entry(band, band_hash) for band, band_hash in enumerate(bands)])
    width = BAND_ENTRY * (BANDS // BAND_GROUPS)
    return [(hashes[group], entries[at : at + width]) for group, at in enumerate(range(0, len(entries), width))]


def band_tokens(reply: bytes) -> list[bytes]:
    """What a band lookup found (``sdd_bands_find``'s reply): the 8-byte token of each record
    under one of the document's band hashes.

    >>> band_tokens(b"a" * 8 + b"b" * 8)
    [b'aaaaaaaa', b'bbbbbbbb']
    """
    reply = bytes(reply)
    if len(reply) % 8:
        raise ValueError("a band lookup's reply is 8-byte tokens")
    return [reply[at : at + 8] for at in range(0, len(reply), 8)]
