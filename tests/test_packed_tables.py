"""The packed SimHash tables and LSH bands against brute-force models, across flushes and restarts."""

import random

import plyvel
import pytest
from hypothesis import example, given, settings, strategies as st

from scrapy_dedup.core.bands import BANDS
from scrapy_dedup.core.fingerprints import hamming
from scrapy_dedup.store.leveldb.packed_tables import PackedBands, PackedSimhashTables

SCOPES = [bytes(8), b"tenant-b"]


class Model:
    """Tables plus the set of live entries they must answer like."""

    def __init__(self, path: str, l0_max: int, l1_max: int) -> None:
        self.path, self.l0_max, self.l1_max = path, l0_max, l1_max
        self.db = plyvel.DB(path, create_if_missing=True)
        self.tables = self._open()
        self.live: set[tuple[bytes, int, bytes]] = set()

    def _open(self) -> PackedSimhashTables:
        return PackedSimhashTables(self.db, l0_max=self.l0_max, l1_max=self.l1_max)

    def add(self, sid: bytes, fp: int, cid: bytes) -> None:
        pending: list = []
        with self.db.write_batch(transaction=True) as wb:
            self.tables.stage_add(wb, sid, (fp,), cid, pending, set())
        self.tables.apply(pending)
        self.live.add((sid, fp, cid))

    def remove(self, sid: bytes, fp: int, cid: bytes) -> None:
        with self.db.write_batch(transaction=True) as wb:
            self.tables.stage_remove(wb, sid, (fp,), cid, set())
        self.live.discard((sid, fp, cid))

    def restart(self) -> None:
        self.db.close()
        self.db = plyvel.DB(self.path)
        self.tables = self._open()

    def check(self, sid: bytes, q: int, k: int = 3) -> None:
        got = sorted(self.tables.near(sid, q, k))
        want = sorted((fp, cid) for s, fp, cid in self.live if s == sid and hamming(fp, q) <= k)
        assert got == want


def near(fp: int, rng: random.Random, bits: int) -> int:
    for bit in rng.sample(range(64), bits):
        fp ^= 1 << bit
    return fp


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), ops=st.integers(20, 200), l0=st.sampled_from([2, 3, 8]), l1=st.sampled_from([4, 16, 50]))
def test_answers_like_a_brute_force_model(tmp_path_factory, seed, ops, l0, l1):
    rng = random.Random(seed)
    model = Model(str(tmp_path_factory.mktemp("tables")), l0, l1)
    base = [rng.getrandbits(64) for _ in range(6)]
    try:
        for _ in range(ops):
            sid = rng.choice(SCOPES)
            fp = near(rng.choice(base), rng, rng.randint(0, 5))
            cid = rng.getrandbits(64).to_bytes(8, "big")
            roll = rng.random()
            if roll < 0.6:
                model.add(sid, fp, cid)
            elif roll < 0.8 and model.live:
                model.remove(*rng.choice(sorted(model.live)))
            elif roll < 0.85:
                model.restart()
            model.check(sid, near(rng.choice(base), rng, rng.randint(0, 3)))
    finally:
        model.db.close()


def test_a_crash_after_a_flush_wrote_its_runs_loses_nothing(tmp_path):
    """Runs written but write-ahead keys not yet deleted: the replay may duplicate, never lose."""
    model = Model(str(tmp_path), 2, 4)
    rng = random.Random(1)
    fps = [rng.getrandbits(64) for _ in range(10)]
    for i, fp in enumerate(fps):
        model.add(bytes(8), fp, i.to_bytes(8, "big"))
    # put back write-ahead keys of entries already packed, as a crash before their deletion would leave them
    with model.db.write_batch() as wb:
        for seq, fp in enumerate(fps[:4], start=1000):
            import struct

            wb.put(b"w" + seq.to_bytes(8, "big"), struct.pack("<QQQ", 0, fp, int.from_bytes(fps.index(fp).to_bytes(8, "big"), "little")))
    model.restart()
    for fp in fps:
        model.check(bytes(8), fp, 0)


def test_remove_then_add_in_one_batch_keeps_the_entry(tmp_path):
    model = Model(str(tmp_path), 2, 4)
    entry = (bytes(8), 0x0F0F_0F0F_0F0F_0F0F, b"\x00" * 7 + b"\x02")
    model.add(*entry)
    pending: list = []
    removed: set = set()
    with model.db.write_batch(transaction=True) as wb:
        sid, fp, cid = entry
        model.tables.stage_remove(wb, sid, (fp,), cid, removed)
        model.tables.stage_add(wb, sid, (fp,), cid, pending, removed)
    model.tables.apply(pending)
    model.check(bytes(8), entry[1], 0)
    model.db.close()


def test_readding_a_removed_entry_revives_it(tmp_path):
    model = Model(str(tmp_path), 2, 4)
    entry = (bytes(8), 0x1234_5678_9ABC_DEF0, b"\x00" * 7 + b"\x01")
    model.add(*entry)
    for i in range(8):  # push it out to a packed run
        model.add(bytes(8), random.Random(i).getrandbits(64), i.to_bytes(8, "big"))
    model.remove(*entry)
    model.check(bytes(8), entry[1], 0)
    model.add(*entry)
    model.check(bytes(8), entry[1], 0)
    model.restart()
    model.check(bytes(8), entry[1], 0)
    model.db.close()


@pytest.mark.parametrize("distance", [0, 1, 2, 3])
def test_recall_within_three_bits_through_every_level(tmp_path, distance):
    model = Model(str(tmp_path), 4, 16)
    rng = random.Random(distance)
    fps = [rng.getrandbits(64) for _ in range(100)]
    for i, fp in enumerate(fps):
        model.add(bytes(8), fp, i.to_bytes(8, "big"))
    for fp in fps:
        assert fp in {f for f, _ in model.tables.near(bytes(8), near(fp, rng, distance), 3)}
    model.db.close()


class BandModel:
    """Packed bands plus the set of live entries they must answer like."""

    def __init__(self, path: str, l0_max: int, l1_max: int) -> None:
        self.path, self.l0_max, self.l1_max = path, l0_max, l1_max
        self.db = plyvel.DB(path, create_if_missing=True)
        self.bands = PackedBands(self.db, l0_max=l0_max, l1_max=l1_max)
        self.live: set[tuple[bytes, tuple[int, ...], bytes]] = set()

    def add(self, sid: bytes, bands: tuple[int, ...], cid: bytes) -> None:
        pending: list = []
        with self.db.write_batch(transaction=True) as wb:
            self.bands.stage_add(wb, sid, bands, cid, pending, set())
        self.bands.apply(pending)
        self.live.add((sid, bands, cid))

    def remove(self, sid: bytes, bands: tuple[int, ...], cid: bytes) -> None:
        with self.db.write_batch(transaction=True) as wb:
            self.bands.stage_remove(wb, sid, bands, cid, set())
        self.live.discard((sid, bands, cid))

    def restart(self) -> None:
        self.db.close()
        self.db = plyvel.DB(self.path)
        self.bands = PackedBands(self.db, l0_max=self.l0_max, l1_max=self.l1_max)

    def check(self, sid: bytes, query: tuple[int, ...]) -> None:
        # set semantics per (band, hash, cluster), as a key per band entry would have
        live_keys = {(band, h, cid) for s, bands, cid in self.live if s == sid for band, h in enumerate(bands)}
        want = {cid for band, h, cid in live_keys if query[band] == h}
        assert self.bands.colliding(sid, query) == want


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), ops=st.integers(20, 120), l0=st.sampled_from([2, 3, 8]), l1=st.sampled_from([4, 16, 50]))
def test_bands_answer_like_a_brute_force_model(tmp_path_factory, seed, ops, l0, l1):
    rng = random.Random(seed)
    model = BandModel(str(tmp_path_factory.mktemp("bands")), l0, l1)
    # few distinct hashes per band, so that entries collide often; some share a block, not a hash
    pool = [[rng.getrandbits(64) for _ in range(4)] + [0x0123_4567_89AB_CDEF, 0x0123_0000_0000_0000] for _ in range(BANDS)]
    try:
        for _ in range(ops):
            sid = rng.choice(SCOPES)
            entry = tuple(rng.choice(pool[band]) for band in range(BANDS))
            cid = rng.getrandbits(64).to_bytes(8, "big")
            roll = rng.random()
            if roll < 0.6:
                model.add(sid, entry, cid)
            elif roll < 0.8 and model.live:
                model.remove(*rng.choice(sorted(model.live)))
            elif roll < 0.85:
                model.restart()
            model.check(sid, tuple(rng.choice(pool[band]) for band in range(BANDS)))
    finally:
        model.db.close()


def test_bands_are_packed_into_few_keys(tmp_path):
    model = BandModel(str(tmp_path), 1024, 1 << 14)
    rng = random.Random(7)
    entries = [tuple(rng.getrandbits(64) for _ in range(BANDS)) for _ in range(1 << 14)]
    for i, entry in enumerate(entries):
        model.add(bytes(8), entry, i.to_bytes(8, "big"))
    keys = sum(1 for _ in model.db.iterator(include_value=False))
    # one run written out: at most one key per band and 12-bit block, a quarter of one per band entry
    assert model.bands.gen == 1
    assert keys <= BANDS * 4096 + 2
    for i in (0, 1000, len(entries) - 1):
        assert model.bands.colliding(bytes(8), entries[i]) == {i.to_bytes(8, "big")}
    model.db.close()


def test_the_memory_levels_hold_the_same_memory_fill_after_fill(tmp_path):
    """The levels are allocated once at their bound: filling them and writing them out again
    and again allocates no more than a fraction of one level (the copies merges used to make
    swung a crawl's private memory by tens of MB)."""
    import tracemalloc

    l0_max, l1_max = 256, 4096
    level_bytes = (l0_max + l1_max) * (8 * (BANDS + 3) + 6 * BANDS)  # entries, block and order per band
    model = BandModel(str(tmp_path), l0_max, l1_max)
    rng = random.Random(11)

    def fill(n: int) -> None:  # as model.add, without the model's own set of what it holds
        for _ in range(n):
            pending: list = []
            with model.db.write_batch(transaction=True) as wb:
                model.bands.stage_add(wb, bytes(8), [rng.getrandbits(64) for _ in range(BANDS)],
                                      rng.getrandbits(64).to_bytes(8, "big"), pending, set())
            model.bands.apply(pending)

    fill(l1_max + l0_max)  # the first write-out
    assert model.bands.gen == 1
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fill(3 * (l1_max + l0_max))
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        model.db.close()
    assert model.bands.gen == 4
    assert peak - base < level_bytes / 2, (peak - base, level_bytes)
    assert current - base < level_bytes / 20, (current - base, level_bytes)


# --- compaction ---------------------------------------------------------------


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**32), ops=st.integers(20, 200), l0=st.sampled_from([2, 3, 8]), l1=st.sampled_from([4, 16, 50]))
def test_compaction_answers_like_the_model(tmp_path_factory, seed, ops, l0, l1):
    """Adds, removals, re-adds, restarts and compactions in any order: the same answers."""
    rng = random.Random(seed)
    model = Model(str(tmp_path_factory.mktemp("tables")), l0, l1)
    base = [rng.getrandbits(64) for _ in range(6)]
    removed: list = []
    try:
        for _ in range(ops):
            sid = rng.choice(SCOPES)
            roll = rng.random()
            if roll < 0.5:
                model.add(sid, near(rng.choice(base), rng, rng.randint(0, 5)), rng.getrandbits(64).to_bytes(8, "big"))
            elif roll < 0.75 and model.live:
                entry = rng.choice(sorted(model.live))
                model.remove(*entry)
                removed.append(entry)
            elif roll < 0.8 and removed:
                model.add(*rng.choice(removed))  # a removed entry comes back
            elif roll < 0.85:
                model.restart()
            elif roll < 0.95:
                model.tables.compact()
                assert next(model.db.iterator(prefix=b"z"), None) is None
            model.check(sid, near(rng.choice(base), rng, rng.randint(0, 3)))
        model.tables.compact()
        model.restart()
        for sid in SCOPES:
            for fp in base:
                model.check(sid, fp)
        assert {(s, fp, cid) for s, fp, cid in model.tables.live_entries()} == model.live
    finally:
        model.db.close()


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32), ops=st.integers(20, 120), l0=st.sampled_from([2, 8]), l1=st.sampled_from([4, 16]))
@example(seed=65, ops=24, l0=2, l1=4)  # every entry of a table removed before a compaction
def test_band_compaction_answers_like_the_model(tmp_path_factory, seed, ops, l0, l1):
    rng = random.Random(seed)
    model = BandModel(str(tmp_path_factory.mktemp("bands")), l0, l1)
    pool = [[rng.getrandbits(64) for _ in range(4)] for _ in range(BANDS)]
    try:
        for _ in range(ops):
            sid = rng.choice(SCOPES)
            roll = rng.random()
            if roll < 0.55:
                model.add(sid, tuple(rng.choice(pool[b]) for b in range(BANDS)), rng.getrandbits(64).to_bytes(8, "big"))
            elif roll < 0.8 and model.live:
                model.remove(*rng.choice(sorted(model.live)))
            elif roll < 0.85:
                model.restart()
            else:
                model.bands.compact()
                assert next(model.db.iterator(prefix=b"t"), None) is None
            model.check(sid, tuple(rng.choice(pool[b]) for b in range(BANDS)))
    finally:
        model.db.close()


def _disk_pairs(db) -> int:
    return sum(len(v) // 16 for _, v in db.iterator(prefix=b"p\x00"))


def test_compaction_drops_removed_entries_from_the_runs(tmp_path):
    model = Model(str(tmp_path / "t"), 64, 256)
    rng = random.Random(5)
    entries = [(SCOPES[0], rng.getrandbits(64), i.to_bytes(8, "big")) for i in range(2000)]
    try:
        for entry in entries:
            model.add(*entry)
        for entry in entries[:800]:
            model.remove(*entry)
        assert model.tables.needs_compaction()
        on_disk = _disk_pairs(model.db)
        assert on_disk >= 1792  # 7 flushes of 256
        assert model.tables.compact() == 800
        assert _disk_pairs(model.db) <= on_disk - 700  # the removed ones left the runs
        assert not model.tables.needs_compaction()
        for sid, fp, _ in entries[::50]:
            model.check(sid, fp)
    finally:
        model.db.close()


def test_a_store_compacts_when_it_closes(tmp_path):
    from scrapy_dedup.store.leveldb import LevelDBStore, packed_tables

    path = str(tmp_path / "store")
    rng = random.Random(9)
    docs = [(rng.getrandbits(64), f"{i:016x}") for i in range(3000)]
    with LevelDBStore(path, {}) as store:
        store._tables.l1_max = 512  # write runs out at this small size
        for fp, cid in docs:
            with store.batch() as batch:
                batch.index_near("", fp, (), cid)
        for fp, cid in docs[:1500]:
            with store.batch() as batch:
                batch.unindex_near("", fp, (), cid)
        assert store._tables.removed >= packed_tables.COMPACT_RATIO * store._tables.on_disk
    with LevelDBStore.open_existing(path) as store:
        assert next(store._db.iterator(prefix=b"z"), None) is None
        assert store.near_candidates("", docs[0][0], (), 0).simhash == []
        assert store.near_candidates("", docs[-1][0], (), 0).simhash == [docs[-1]]


def test_a_near_lookup_reads_the_bands_only_when_they_are_read(tmp_path):
    """A page a SimHash candidate decides costs no band lookup: on LevelDB ``near_candidates``
    reads the band index when its answer's ``bands`` are first read, once."""
    from scrapy_dedup.core.bands import band_hashes
    from scrapy_dedup.store.leveldb import LevelDBStore

    bands = band_hashes(bytes(range(256)) * 4)
    with LevelDBStore(str(tmp_path / "store"), {}) as store:
        with store.batch() as batch:
            batch.index_near("", 0b1011, bands, "00000000000000aa")
        lookups = []
        colliding = store._bands.colliding
        store._bands.colliding = lambda *args: lookups.append(args) or colliding(*args)
        near = store.near_candidates("", 0b1011, bands)
        assert near.simhash == [(0b1011, "00000000000000aa")] and lookups == []
        assert near.bands == {"00000000000000aa"} and near.bands == {"00000000000000aa"}
        assert len(lookups) == 1
