"""A settle writes in batches of a bounded size (one batch of a whole store is held in memory,
and on Redis is a transaction longer than a client waits for): the same settled state as one
batch, and a settle cut short between two batches is followed by a full one."""

from __future__ import annotations

import pytest
from test_settle import PARAMS, SETTINGS, ingest, orders, settled_state

from scrapy_dedup.decide import settle as settling
from scrapy_dedup.decide.settle import SETTLED_META, settle
from scrapy_dedup.store.records import get_meta, iter_urls


def test_batches_of_one_cluster_settle_alike(backend, tmp_path, monkeypatch):
    states = []
    for n, size in enumerate((1_000, 1)):
        monkeypatch.setattr(settling, "_BATCH", size)
        with backend(str(tmp_path / f"s{n}"), PARAMS) as store:
            store.begin_run()
            ingest(store, orders()[2])
            settle(store, **SETTINGS)
            states.append(settled_state(store))
    assert states[0] == states[1]


def test_a_settle_cut_short_is_followed_by_a_full_one(backend, tmp_path, monkeypatch):
    """Settled once, then the rest of the pages come, and the next settle stops after two of its
    batches: the settle after it is a full one, and ends where settling once does."""
    first, then = orders()[1][:3], orders()[1][3:]
    with backend(str(tmp_path / "reference"), PARAMS) as store:
        store.begin_run()
        ingest(store, first + then)
        settle(store, **SETTINGS)
        reference = settled_state(store)
    monkeypatch.setattr(settling, "_BATCH", 1)
    with backend(str(tmp_path / "s"), PARAMS) as store:
        store.begin_run()
        ingest(store, first)
        settle(store, **SETTINGS)
        ingest(store, then)
        opened = store.batch
        count = 0

        def failing():
            nonlocal count
            count += 1
            if count == 3:  # two batches applied, then the process stops
                raise KeyboardInterrupt
            return opened()

        monkeypatch.setattr(store, "batch", failing)
        with pytest.raises(KeyboardInterrupt):
            settle(store, **SETTINGS)
        monkeypatch.setattr(store, "batch", opened)
        assert get_meta(store, SETTLED_META) is None  # the next settle is a full one
        assert settle(store, **SETTINGS).affected == sum(1 for r in iter_urls(store) if r.has_content)
        assert settled_state(store) == reference


def test_a_settle_reads_redis_many_clusters_a_round_trip(redis_single, tmp_path):
    """On Redis, settling reads the clusters' member sets many a round trip: a store of 300 more
    clusters costs a settle of it a few more round trips, not one a cluster; and so does
    ``scrapy dedup check`` (check_store)."""
    from redis_fixtures import redis_backend
    from test_frontier_checks import _counted

    from scrapy_dedup.core.fingerprints import fingerprint, raw_hash
    from scrapy_dedup.decide.index import ContentIndex, Document
    from scrapy_dedup.store.maintenance import check_store

    trips = []
    for n, pages in enumerate((100, 400)):
        with redis_backend(redis_single.url)(str(tmp_path / f"s{n}"), PARAMS) as store:
            store.begin_run()
            index = ContentIndex(store, store.run, **SETTINGS)
            for page in range(pages):
                text = " ".join(f"p{page}w{w}" for w in range(60))
                url = f"http://h/{page}"
                index.ingest(Document(url, url, fingerprint(text), raw_hash(text.encode()), text=text))
            settle(store, **SETTINGS)
            counting = _counted(store)
            result = settle(store, **SETTINGS, incremental=False)
            assert result.clusters == pages and result.rewritten == 0
            settled = counting.round_trips
            assert check_store(store).consistent
            trips.append((settled, counting.round_trips - settled))
    assert trips[1][0] - trips[0][0] < 30 and trips[1][1] - trips[0][1] < 30, trips


def test_an_incremental_settle_reads_the_member_sets_it_writes_again(backend, tmp_path, monkeypatch):
    """The URL records say which cluster holds each document: an incremental settle tells the
    clusters decided since from them, and reads the member sets of the clusters it settles
    again only, not the store's every set."""
    from test_settle import LATER

    with backend(str(tmp_path / "s"), PARAMS) as store:
        store.begin_run()
        ingest(store, orders()[3])
        settle(store, **SETTINGS)
        ingest(store, ["y"], texts=LATER)  # near nothing: a cluster of its own
        read: list[str] = []
        many = type(store).set_members_many

        def set_members_many(self, name, owners):
            read.extend(owners)
            return many(self, name, owners)

        monkeypatch.setattr(type(store), "set_members_many", set_members_many)
        result = settle(store, **SETTINGS)
        y = next(r for r in iter_urls(store) if r.key.endswith("/y"))
        assert result.affected == 1 and read == [y.cluster_id]
        monkeypatch.undo()
        assert settle(store, **SETTINGS, incremental=False).rewritten == 0
