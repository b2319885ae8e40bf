"""Key layout of the Redis store (layout ``redis-7``): names, hash tags, fixed-width bytes.

Pure: no Redis client here, so the layout can be read and tested on its own.

Every key starts with the crawl's prefix (``DEDUP_REDIS_PREFIX``, by default
``dedup:<spider name>``), so several crawls share one server, and carries a
``{hash tag}``: Redis Cluster puts keys with the same tag in the same slot. Each
server-side function (``functions.lua``) touches the keys of one tag only,
so no call is CROSSSLOT, and the tags are chosen so that the work spreads:

=============================  =====================================  =====================
key                            holds                                  slots
=============================  =====================================  =====================
``P:f:{f<bucket>}``            frontier bucket: 8-byte records        16,384 buckets, spread
                               (6-byte URL-key digest, uint16 run)
``P:n:{n<t><g>-<k>}<scope>``   SimHash table ``t``, slot group ``g``  4 x 16 groups, one
                               (the block's top 4 bits) of the        slot each, evenly
                               representatives, field = the 16-bit    spaced over the 16,384
                               block (2 bytes), value its 16-byte     slots; a decision reads
                               records (SimHash, token)               4 groups
``P:q:{q<shard>}``             requests owed: request id -> its       64 shards, spread
                               holder's id and the request (hash)
``P:d:{d<shard>}``             URL keys being decided: key digest     64 shards, spread
                               -> its holder's id and hold (hash)
``P:b:{b<g>-<k>}<scope>``      LSH band group ``g`` (4 bands) of the  8 slot groups, evenly
                               representatives, field = band (1       spaced; a decision
                               byte) and bucket (2 bytes: 14 bits of  calls each group once
                               the band hash), value its 12-byte
                               records (the band hash's low 4 bytes,
                               token)
=============================  =====================================  =====================

The frontier needs no per-URL key: 2^14 buckets of packed 8-byte records cost
about 8-12 bytes per URL plus a fixed ~1.5 MB for the buckets, against 88 bytes
per URL for a set of 40-character fingerprints (scrapy-redis's dupefilter).

Why near-duplicate decisions spread: a decision reads the four buckets its SimHash
belongs to (four slots) and writes a representative's entry in the same four. Two
decisions at once may both keep a near duplicate; settling (``scrapy dedup settle``)
merges them, so no bucket is ever held across calls.

Why slot groups: the buckets of one group are fields of one hash (one slot), so a
read of many SimHashes' buckets (a benchmark's preload, a settle) takes one call per
group (at most 64) instead of one per bucket: the client's cost per command and per
argument is what bounds decisions per second. Each table's 65,536 buckets fall in 16 groups by
the block's top 4 bits, and each group's tag is chosen (the smallest ``k``) so that
its slot lies in its own 256-slot window of the 16,384: the 64 slots are evenly
spaced, so any split of the slot range into contiguous shares (as ``redis-cli
--cluster create`` makes) gives each master its share of the tables, and no slot
carries more than 1/64 of the near-duplicate work. The scope is in the key name,
outside the tag: every scope uses the same 64 balanced slots. Fewer groups would
mean fewer calls per read but a coarser spread (16 slots cannot be split evenly
over 3 masters); more groups, more calls per read.
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


# -- scopes and cluster tokens ----------------------------------------------------------------


def scope_digest(scope: str) -> bytes:
    """8 bytes standing for a dedup scope (the same digest as the LevelDB backend's)."""
    return xxhash.xxh64_digest(scope.encode("utf-8"))


def cluster_token(cluster_id: str) -> bytes:
    """A cluster id (16 hex digits) as the 8 bytes stored in tables."""
    return bytes.fromhex(cluster_id)


# -- record tables --------------------------------------------------------------------------
#
# A table of the store (URL records, clusters, the exact index, ...) is sharded over hashes
# ``P:t:<table>:{t<table><shard>}``, one slot each, by the xxh3 of the record's key. Redis keeps
# a hash of at most 128 fields (``hash-max-listpack-entries``) of at most 64 bytes
# (``hash-max-listpack-value``) as one compact listpack, a few bytes an entry over its field and
# value; past either limit it becomes a hash table, about 40 bytes more an entry (its entry, the
# bucket, two allocations rounded up to the allocator's size classes). So tables store digests,
# not text, where a key is only looked up, and the tables whose records fit in 64 bytes have
# more shards:
#
# ============  ======================  =============================  ======
# table         field                   value                          shards
# ============  ======================  =============================  ======
# exact         12-byte digest of the   cluster id, 8 bytes            16,384
#               scope and content hash
# emitted       12-byte digest of the   content hash, 16 bytes         16,384
#               URL key
# raw           12-byte digest of the   URL key (compact while URL     16,384
#               raw body hash           keys are at most 64 bytes)
# cluster       cluster id, 8 bytes     the cluster record: 16 bytes   1,024
#                                       and the representative's key
# minhash       1 byte (64 fields a     records packed end to end:     1,024
#               shard, by the URL       the URL key's 12-byte digest,
#               key's digest)           the signature's length
#                                       (uint16), the signature
# text          12-byte digest of the   text                           1,024
#               URL key
# any other     the key                 the record                     1,024
# ============  ======================  =============================  ======
#
# 16,384 shards hold up to about 1.8 x 10^6 records before their hashes leave the listpack form
# (a shard holds about 110 then); a crawl larger than that keeps them compact with a higher
# ``hash-max-listpack-entries`` on the server. They cost one key a shard, some 100 bytes: 1.6 MB
# a table, 16 bytes a document at 10^5 and 1.6 at 10^6. A cluster record holds a URL key, which
# is seldom as short as 48 bytes: its table is a hash table whatever its shards, and keeps 1,024.
# A MinHash signature (256 bytes) is too long for a listpack, and alone in a hash-table entry it
# would take 392 bytes (its entry, its field, and 260 bytes of value in the allocator's 320-byte
# class); packed, about 15 to a field at 10^6 documents, the benchmark measured 298 bytes a
# document (386 with an entry each). Its records are read, replaced and taken out by server-side
# functions (``sdd_packed_*``), which rewrite the field: about 41 KB a field at 10^7 documents.
# A digest field cannot be read back, so the tables keyed by one are never scanned (the cluster
# table, which reports scan, keeps its ids whole). Two keys' 12-byte digests are equal with a chance
# of 2^-96: among 10^8 keys, some two share one with a chance of about 10^-13.

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


def _text_field(key: str) -> bytes:
    return key.encode("utf-8", "surrogatepass")


def _same(value: bytes) -> bytes:
    return value


def _hex_out(raw: bytes) -> bytes:
    return raw.hex().encode("ascii")


@dataclass(frozen=True)
class TableLayout:
    """How one table's records are stored: its shards, a key's field, a value's bytes."""

    shards: int
    field: Callable[[str], bytes] = _text_field
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


def near_field(block: int) -> bytes:
    """The hash field of a bucket: its block, 2 bytes big-endian (the server derives the
    same bytes from a record's SimHash)."""
    return block.to_bytes(2, "big")


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


def key_tag(key: str) -> str:
    """The hash tag of a key (what decides its slot)."""
    start = key.index("{") + 1
    return key[start : key.index("}", start)]


#: below this many (record, SimHash) pairs a plain loop beats numpy's fixed cost per call
#: (a page's decision reads a few records; a benchmark's preload thousands)
_FEW_PAIRS = 512


def _records_near_few(parts, simhashes, max_distance, out):
    """:func:`records_near` by a loop over the pairs (the same answer as
    :func:`_records_near_vectorised`)."""
    queries = [q & 0xFFFF_FFFF_FFFF_FFFF for q in simhashes]
    for table, data in parts:
        shift = table * BLOCK_BITS
        blocks = [(q >> shift) & _BLOCK_MASK for q in queries]
        for pos in range(0, len(data), NEAR_RECORD):
            fp = int.from_bytes(data[pos : pos + 8], "big")
            block = (fp >> shift) & _BLOCK_MASK
            for i, q in enumerate(queries):
                if blocks[i] == block and (fp ^ q).bit_count() <= max_distance:
                    out[i].add((fp, data[pos + 8 : pos + NEAR_RECORD]))
    return out


def records_near(
    parts: Sequence[tuple[int, bytes]], simhashes: Sequence[int], max_distance: int
) -> list[set[tuple[int, bytes]]]:
    """Per SimHash, the (SimHash, token) records within ``max_distance`` in its buckets.

    ``parts``: (table, records of any buckets of that table, concatenated). A record lies
    in the bucket of its own block in each table, so it is compared with the SimHashes of
    the same block in the same table: one vectorised Hamming pass over every part, or a
    plain loop when the pairs are few.

    >>> a, b = near_record(0x0001, b"a" * 8), near_record(0x0002, b"b" * 8)
    >>> records_near([(0, a + b)], [0x1000_0000_0000_0001, 0x0003], 1)  # 0x0003: another bucket
    [{(1, b'aaaaaaaa')}, set()]
    """
    out: list[set[tuple[int, bytes]]] = [set() for _ in simhashes]
    parts = [(table, data) for table, data in parts if data]
    if not parts or not simhashes:
        return out
    if any(len(data) % NEAR_RECORD for _, data in parts):
        raise ValueError("a near-duplicate bucket's length is not a multiple of 16 bytes")
    if sum(len(d) for _, d in parts) // NEAR_RECORD * len(simhashes) <= _FEW_PAIRS:
        return _records_near_few(parts, simhashes, max_distance, out)
    return _records_near_vectorised(parts, simhashes, max_distance, out)


def _records_near_vectorised(parts, simhashes, max_distance, out):
    """:func:`records_near` by one numpy pass over every (table, block) key."""
    data = b"".join(d for _, d in parts)
    records = np.frombuffer(data, dtype=">u8").reshape(-1, 2)
    fps = records[:, 0].astype(np.uint64)
    tables = np.repeat(
        np.array([t for t, _ in parts], dtype=np.uint64),
        [len(d) // NEAR_RECORD for _, d in parts],
    )
    mask = np.uint64(_BLOCK_MASK)
    shift = np.uint64(BLOCK_BITS)
    # one key per (table, block): records and SimHashes meet on equal keys
    record_keys = (tables << shift) | ((fps >> (tables * shift)) & mask)
    order = np.argsort(record_keys, kind="stable")
    sorted_keys = record_keys[order]
    queries = np.array([q & 0xFFFF_FFFF_FFFF_FFFF for q in simhashes], dtype=np.uint64)
    q_tables = np.tile(np.arange(BLOCKS, dtype=np.uint64), len(queries))
    q_fps = np.repeat(queries, BLOCKS)
    query_keys = (q_tables << shift) | ((q_fps >> (q_tables * shift)) & mask)
    lo = np.searchsorted(sorted_keys, query_keys, side="left")
    hi = np.searchsorted(sorted_keys, query_keys, side="right")
    counts = hi - lo
    total = int(counts.sum())
    if not total:
        return out
    owner = np.repeat(np.arange(len(query_keys)), counts)
    starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
    picked = order[np.arange(total) + starts]
    close = np.bitwise_count(fps[picked] ^ q_fps[owner]) <= max_distance
    for i, r in zip((owner[close] // BLOCKS).tolist(), picked[close].tolist()):
        out[i].add((int(fps[r]), data[NEAR_RECORD * r + 8 : NEAR_RECORD * r + NEAR_RECORD]))
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


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


# -- LSH band buckets -----------------------------------------------------------------------
#
# A document's 32 band hashes go to 32 buckets, one per band, named by (band, top
# BAND_BUCKET_BITS bits of the band hash). The BAND_GROUPS groups of BANDS // BAND_GROUPS
# consecutive bands are BAND_GROUPS slots: the buckets of one group are fields of one hash
# per scope (``P:b:{<tag>}<scope>``), a field the band (1 byte) and the bucket (2 bytes), so one call per group reads
# all of a document's buckets in it with one HMGET and writes them with one HSET
# (8 calls per step instead of 32, and one key per group instead of one per bucket). Each
# group's tag is chosen so that its slot lies near the middle of its own 1/8 of the 16,384
# slots: a cluster whose masters own equal contiguous slot ranges (as ``redis-cli --cluster
# create`` makes) shares the band work as evenly as 8 slots can (2 masters: 4 + 4 groups; 3
# masters: 3 + 2 + 3; 4 masters: 2 each). The scope is in the key name, outside the tag. Fewer
# groups would mean fewer calls per page but a coarser spread over the masters (with 4, one of
# 3 masters would carry half of the band work); more groups, more calls.
#
# A bucket is a string of 12-byte records: the band hash's low 4 bytes (its tag) and an 8-byte
# cluster or decision token. The bucket already names the band and 14 bits of the band hash,
# so the tag tells two band hashes of a bucket apart but for one pair in 2^32: a lookup at 10^7
# documents meets about 610 x 32 other records, so one decision in 200,000 gets a candidate
# whose band hash only shares the tag, and near_match, which compares the two signatures,
# turns it down as it would any candidate (store format 3 kept the whole 8 bytes: 16-byte
# records). 14 bits give 16,384 buckets per band, 524,288 per scope: at 10^6 representatives a
# bucket holds about 61 records (732 B), at 10^7 about 610 (7.3 KB). A call reads its buckets
# whole into the function, so the server time grows with them (bench_redis.py, one group's 4
# buckets: 16-38 us at 10^6 and 77-105 us at 10^7 documents with 14 bits, 39-52 and 300-346 us
# with 12, 19-32 and 35-40 us with 16; as when each bucket was a key of its own: at 10^7 the
# scan of the records leads). Fewer bits mean longer scans, more bits more fields.
#
# Why fields and not a key per bucket (measured on one server, MEMORY USAGE and SLOWLOG, on a
# 2-core machine shared with other work, so time as ranges over interleaved rounds):
# - bytes: a bucket as a field takes about 30 bytes fewer than as a key. Band bytes per
#   document after 400 PostgreSQL pages decided as a crawl does 3,146 -> 2,268 (12,082 keys ->
#   8 hashes; the crawl's keys in all 9,397 -> 8,517); at 1,000 random documents 3,241 ->
#   2,264 (31,015 keys -> 8), at 100,000 986 -> 819 (523,123 keys -> 8). Past about 10^6
#   documents the bytes of each record lead either way (16 then, 12 since).
# - time: per decision, the band part of a step is 2 hashes per group instead of 8 keys: at
#   the open 16 keys and 8 arguments instead of 64 and 64, 16 HMGET and 8 HSET inside instead
#   of 64 GET and 32 SET, and what it found replied as one string per group instead of a list
#   per bucket (a reply element costs the server about as much as a bucket's work); close and
#   index 8 HMGET and 8 HSET/HDEL instead of 32 GET and 32 SET/DEL. Server CPU of the fused
#   calls of one new page, replayed in a loop on the store of 400 PostgreSQL pages: open and
#   close 991-1,031 -> 819-831 us, index out and in 568-712 -> 502-552 us (INFO cpu). Over the
#   400 pages themselves (six interleaved rounds, SLOWLOG wall time inside the server):
#   sdd_near_open 543-818 -> 374-631 us per call, sdd_near_close 255-376 -> 240-373, but
#   sdd_near_index 296-464 -> 312-522, as a hash command inside a function takes longer than
#   a string one (HMGET of 4 fields about 5 us, GET 1 us); server CPU per page 1,555-2,444 ->
#   1,207-2,578 us (eight rounds, medians 1,757 -> 1,664) and the store's client wall time
#   4.9-7.7 -> 3.7-7.7 ms per page (medians 6.0 -> 5.1). On this machine any command costs the
#   server some 20-50 us of CPU whatever it does (a PING included), and that part does not
#   change with the layout.

BAND_GROUPS = 8
BAND_BUCKET_BITS = 14
BAND_FIELD = 3  # a bucket's field: band, then bucket (big-endian)
BAND_TAG = 4  # what a band record keeps of its band hash: the low 4 bytes
BAND_ENTRY = BAND_FIELD + BAND_TAG  # a band's field, then its tag
BAND_RECORD = BAND_TAG + 8  # a bucket's record: the tag and an 8-byte cluster or decision token
_TAG_MASK = (1 << (8 * BAND_TAG)) - 1
_BAND_SLOT_SPREAD = 256  # a group's slot is within this many slots of its range's middle


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
def _band_hashes(prefix: str, scope: str) -> tuple[tuple[str], ...]:
    sid = scope_digest(scope).hex()
    return tuple((band_hash_key(prefix, sid, group),) for group in range(BAND_GROUPS))


def band_calls(prefix: str, scope: str, bands: Sequence[int]) -> list[tuple[tuple[str], bytes]]:
    """Per band group, ((its hash,), entries): per band of the group its field and its tag
    (the band hash's low 4 bytes), concatenated (BAND_ENTRY bytes each). One call to a band
    function per group, on one slot.

    >>> calls = band_calls("p", "", list(range(32)))
    >>> len(calls), len(calls[0][0]), calls[0][0][0].startswith("p:b:"), len(calls[0][1])
    (8, 1, True, 28)
    >>> calls[1][1][:BAND_ENTRY] == band_field(4, 4) + (4).to_bytes(4, "big")
    True
    """
    hashes = _band_hashes(prefix, scope)
    entries = b"".join([band_entry(band, band_hash) for band, band_hash in enumerate(bands)])
    width = BAND_ENTRY * (BANDS // BAND_GROUPS)
    return [(hashes[group], entries[at : at + width]) for group, at in enumerate(range(0, len(entries), width))]


def band_found(reply: bytes) -> list[tuple[int, bytes]]:
    """What a band lookup found (``sdd_bands_find``'s reply, one per band group): per record
    under one of the document's band hashes, (position of its hash in the call, 0 for one
    hash; its 8-byte token).

    >>> band_found(b"\\x00" + b"a" * 8 + b"\\x01" + b"b" * 8)
    [(0, b'aaaaaaaa'), (1, b'bbbbbbbb')]
    """
    reply = bytes(reply)
    if len(reply) % 9:
        raise ValueError("a band lookup's reply is 9-byte items")
    return [(reply[at], reply[at + 1 : at + 9]) for at in range(0, len(reply), 9)]
