"""Settling: the same set of documents ends in the same clusters, whatever order they came in.

The pages form a chain of near duplicates, D~A~B~C~E, where no page is near the one two steps
away (A and C share about 76% of their shingles, below the 0.8 threshold): decided online, a
page joins whichever neighbour it meets first, so the provisional clusters depend on the order.
Settled, they do not, on every backend."""

from __future__ import annotations

import random
from functools import partial
from itertools import permutations

from scrapy_dedup.core.fingerprints import fingerprint, near_match, raw_hash
from scrapy_dedup.decide.clusters import cluster_id_for
from scrapy_dedup.decide.index import ContentIndex, Document
from scrapy_dedup.decide.settle import settle
from scrapy_dedup.reports import export
from scrapy_dedup.store.records import get_minhash, get_url, iter_clusters, iter_urls, members_of

PARAMS = {"v": 1}
SETTINGS = {"max_distance": 3, "min_jaccard": 0.8, "min_tokens": 50}


def _mutate(words: list[str], start: int, tag: str, every: int = 80) -> list[str]:
    out = list(words)
    for at in range(start, len(out), every):
        out[at] = f"{tag}{at}"
    return out


def chain_texts() -> dict[str, str]:
    """D~A~B~C~E (each near the next, none near the one two steps away), B2 an exact copy of B
    at another URL, X unrelated."""
    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(5000)]
    a = [rng.choice(vocabulary) for _ in range(400)]
    b = _mutate(a, 3, "b")
    c = _mutate(b, 23, "c")
    d = _mutate(a, 13, "d", every=57)
    e = _mutate(c, 33, "e")
    x = [rng.choice(vocabulary) for _ in range(400)]
    texts = {"a": a, "b": b, "c": c, "d": d, "e": e, "b2": b, "x": x}
    return {name: " ".join(words) for name, words in texts.items()}


TEXTS = chain_texts()


def orders() -> list[list[str]]:
    """The chain A~B~C in all six orders, the other pages around it, and each order reversed."""
    out = []
    for n, chain in enumerate(permutations("abc")):
        rest = ["d", "e", "b2", "x"]
        rest = rest[n % 4 :] + rest[: n % 4]
        order = [*rest[:2], *chain, *rest[2:]]
        out += [order, order[::-1]]
    return out


def url(name: str) -> str:
    return f"http://h/{name}"


def ingest(store, order: list[str], authority=(), texts=TEXTS) -> None:
    index = ContentIndex(store, store.run, authority=authority, **SETTINGS)
    for name in order:
        text = texts[name]
        index.ingest(Document(url(name), url(name), fingerprint(text), raw_hash(text.encode()), text=text))


def partition(store) -> set[tuple[str, frozenset]]:
    return {(c.representative, frozenset(members_of(store, c))) for c in iter_clusters(store)}


def representatives(store) -> dict[str, str]:
    """Each document's representative's URL key."""
    reps = {c.cluster_id: c.representative for c in iter_clusters(store)}
    return {r.key: reps[r.cluster_id] for r in iter_urls(store) if r.has_content}


def settled_state(store) -> dict:
    """Everything settled: each URL's place, each cluster, the export (without its times)."""
    places = {
        r.key: (r.cluster_id, r.status, r.reason, r.duplicate_of, r.distance, r.jaccard)
        for r in iter_urls(store)
    }
    clusters = {c.cluster_id: (c.to_json(), tuple(members_of(store, c))) for c in iter_clusters(store)}
    documents = [
        {k: v for k, v in doc.items() if k not in ("first_seen", "last_seen")} for doc in export.documents(store)
    ]
    return {"places": places, "clusters": clusters, "export": sorted(documents, key=lambda d: d["document_id"])}


def reported_split(store) -> tuple[int, int]:
    """The exact/near split ``scrapy dedup summary`` reads from the store."""
    from scrapy_dedup.reports import summary

    copies = summary.collect(store).copies
    return copies.get("exact_duplicate", 0), copies.get("near_duplicate", 0)


def test_the_settled_clusters_do_not_depend_on_the_order(backend, tmp_path):
    provisional, settled, revised = set(), [], 0
    for n, order in enumerate(orders()):
        with backend(str(tmp_path / f"s{n}"), PARAMS) as store:
            store.begin_run()
            ingest(store, order)
            provisional.add(frozenset(partition(store)))
            before = representatives(store)
            result = settle(store, **SETTINGS)
            revised += result.revised
            # dedup/settle/revised: the documents whose representative settling changed
            after = representatives(store)
            assert result.revised == sum(before[key] != after[key] for key in after)
            assert result.documents == len(TEXTS)
            # dedup/settle/exact_duplicate and near_duplicate: the split summary reads
            assert (result.exact_duplicate, result.near_duplicate) == reported_split(store)
            settled.append(settled_state(store))
            # settling again changes nothing
            again = settle(store, **SETTINGS)
            assert (again.revised, again.rewritten) == (0, 0)
            assert settled_state(store) == settled[-1]
    # the orders did disagree online, and settling revised their decisions ...
    assert len(provisional) > 1 and revised > 0
    # ... into one settled state
    assert all(state == settled[0] for state in settled[1:])


def test_no_member_is_chained_to_its_representative(backend, tmp_path):
    with backend(str(tmp_path / "s"), PARAMS) as store:
        store.begin_run()
        ingest(store, orders()[1])
        settle(store, **SETTINGS)
        clusters = list(iter_clusters(store))
        assert 1 < len(clusters) < len(TEXTS)
        for cluster in clusters:
            rep = fingerprint(TEXTS[cluster.representative.rsplit("/", 1)[1]])
            # named after its representative: the document_id stays while the representative does
            assert cluster.cluster_id == cluster_id_for(cluster.scope, cluster.representative)
            for key in members_of(store, cluster):
                member = fingerprint(TEXTS[key.rsplit("/", 1)[1]])
                assert member.content_hash == rep.content_hash or near_match(member, rep, **{
                    "max_distance": 3, "min_jaccard": 0.8, "min_tokens": 50})[0], key
                record = get_url(store, key)
                assert record.cluster_id == cluster.cluster_id
                assert (record.duplicate_of is None) == (key == cluster.representative)


def test_the_settled_store_goes_on_deciding(backend, tmp_path):
    """Pages decided after a settle join the settled clusters (the indexes moved with them), and
    the next settle ends where settling all the pages at once does."""
    later = {"copy-of-b": TEXTS["b"], "near-c": TEXTS["c"] + " one more line"}
    states = []
    for n, (first, then) in enumerate(((["a", "c", "x", "b"], list(later)), ([*later, "b", "x", "c", "a"], []))):
        with backend(str(tmp_path / f"s{n}"), PARAMS) as store:
            store.begin_run()
            ingest(store, first, texts={**TEXTS, **later})
            settle(store, **SETTINGS)
            settled_ids = {c.cluster_id for c in iter_clusters(store)}
            index = ContentIndex(store, store.run, **SETTINGS)
            for name in then:
                text = later[name]
                decision = index.ingest(Document(url(name), url(name), fingerprint(text), raw_hash(text.encode()), text=text))
                assert decision.status in ("exact_duplicate", "near_duplicate"), name
                assert decision.cluster_id in settled_ids
            settle(store, **SETTINGS)
            states.append(settled_state(store))
    assert states[0] == states[1]


def test_authority_url_prefixes_choose_the_representative(backend, tmp_path):
    """DEDUP_AUTHORITY with a URL prefix: its page represents the cluster whatever its length."""
    chosen = {}
    for preferred in ("http://h/a", "http://h/b2"):
        with backend(str(tmp_path / preferred.rsplit("/", 1)[1]), PARAMS) as store:
            store.begin_run()
            ingest(store, ["b2", "b", "a", "x"], authority=(preferred,))
            settle(store, **SETTINGS, authority=(preferred,))
            chosen[preferred] = {c.representative for c in iter_clusters(store)}
    assert "http://h/a" in chosen["http://h/a"] and "http://h/b" not in chosen["http://h/a"]
    assert "http://h/b2" in chosen["http://h/b2"] and "http://h/b" not in chosen["http://h/b2"]


def test_authority_outranks_the_length(backend, tmp_path):
    """B is A with a few words replaced by shorter ones: A has the longer text and represents
    the pair by default; with B's URL prefix in DEDUP_AUTHORITY, B does."""
    assert len(TEXTS["b"]) < len(TEXTS["a"])
    chosen = {}
    for name, authority in (("default", ()), ("preferred", ("http://h/b",))):
        with backend(str(tmp_path / name), PARAMS) as store:
            store.begin_run()
            ingest(store, ["a", "b"], authority=authority)
            settle(store, **SETTINGS, authority=authority)
            (cluster,) = iter_clusters(store)
            chosen[name] = cluster.representative
    assert chosen == {"default": "http://h/a", "preferred": "http://h/b"}



def test_every_backend_settles_alike(tmp_path, redis_single):
    """LevelDB, memory and Redis end with the same settled state (each fed another order)."""
    from redis_fixtures import redis_backend

    from scrapy_dedup.store.leveldb import LevelDBStore
    from scrapy_dedup.store.memory import MemoryStore

    states = []
    for n, backend in enumerate((LevelDBStore, MemoryStore, redis_backend(redis_single.url))):
        path = str(tmp_path / f"s{n}")
        with backend(path, PARAMS) as store:
            store.begin_run()
            ingest(store, orders()[n * 3])
            settle(store, **SETTINGS)
            states.append(settled_state(store))
        if backend is MemoryStore:
            MemoryStore.discard(path)
    assert states[0] == states[1] == states[2]


LATER = {"y": " ".join(f"y{i}" for i in random.Random(3).sample(range(5000), 400))}


def near_entries(store) -> set[tuple[str, str]]:
    """(document, cluster id) of every entry the SimHash tables and bands answer for a
    document's own fingerprints (its representative's, and those of others it shares a band with)."""
    from scrapy_dedup.core.bands import band_hashes

    found = set()
    for r in iter_urls(store):
        if r.has_content and r.simhash is not None:
            near = store.near_candidates(r.scope, r.simhash, band_hashes(get_minhash(store, r.key)), 0)
            found |= {(r.key, cid) for _, cid in near.simhash} | {(r.key, cid) for cid in near.bands}
    return found


def test_settled_near_index_holds_the_representatives_only(backend, tmp_path):
    """Settling keeps one entry in the SimHash tables and bands per representative: a cluster
    settled under its id keeps its entry, a new one is added, one gone is removed."""
    with backend(str(tmp_path / "s"), PARAMS) as store:
        store.begin_run()
        ingest(store, orders()[3])
        for change in (None, "a"):
            if change:  # A goes: B takes its cluster over, C moves; then Y, near nothing
                ContentIndex(store, store.run, **SETTINGS).forget(url(change), 404)
                ingest(store, ["y"], texts=LATER)
            settle(store, **SETTINGS)
            clusters = {c.cluster_id: c.representative for c in iter_clusters(store)}
            entries = near_entries(store)
            assert {cid for _, cid in entries} <= set(clusters)  # no entry of a cluster gone
            assert {(rep, cid) for cid, rep in clusters.items()} <= entries  # each representative's


def test_an_incremental_settle_ends_where_a_full_one_does(backend, tmp_path):
    """After a settle, only the clusters decided since are settled again, with every document
    connected to theirs; the result is the one of settling every page of the store at once."""
    with backend(str(tmp_path / "s"), PARAMS) as store:
        store.begin_run()
        ingest(store, orders()[3])
        assert settle(store, **SETTINGS).affected == len(TEXTS)
        assert settle(store, **SETTINGS).affected == 0  # nothing decided since
        # A, the representative of A, B, B2 and D, goes away: B represents them now and, near
        # C, takes C from the cluster of C and E, which nothing decided since touched; then a
        # page Y near nothing comes
        ContentIndex(store, store.run, **SETTINGS).forget(url("a"), 404)
        ingest(store, ["y"], texts=LATER)
        result = settle(store, **SETTINGS)
        assert result.affected == 6  # B, B2, D; C and E, reached from them; Y (not X)
        # the split counts the clusters kept as they were too (X's)
        assert (result.exact_duplicate, result.near_duplicate) == reported_split(store)
        incremental = settled_state(store)
        assert settle(store, **SETTINGS, incremental=False).rewritten == 0
        assert settled_state(store) == incremental
    with backend(str(tmp_path / "fresh"), PARAMS) as store:
        store.begin_run()
        ingest(store, ["y", "x", "e", "d", "b2", "c", "b"], texts={**TEXTS, **LATER})
        settle(store, **SETTINGS)
        fresh = settled_state(store)
    # the same documents, clusters and export (the fresh store never knew A's URL)
    del incremental["places"][url("a")]
    assert incremental == fresh


def places(store) -> dict:
    return {r.key: (r.cluster_id, r.status, r.reason, r.duplicate_of, r.distance, r.jaccard) for r in iter_urls(store)}


def test_settling_keeps_what_a_recrawl_found(backend, tmp_path):
    """A re-crawl finds its pages unchanged and one new copy: settling places the copy and
    leaves every member's ``unchanged`` as the crawl counted it; it says how many URL records
    it wrote again, and counts the split of the whole store (X and its copy X2, a cluster it
    kept as it was, too)."""
    texts = {**TEXTS, "x2": TEXTS["x"], "b3": TEXTS["b"]}
    with backend(str(tmp_path / "s"), PARAMS) as store:
        store.begin_run()
        first = ["a", "b", "b2", "d", "x", "x2"]
        ingest(store, first, texts=texts)
        settle(store, **SETTINGS)
        store.begin_run()
        ingest(store, first, texts=texts)
        assert {r.status for r in iter_urls(store)} == {"unchanged"}
        ingest(store, ["b3"], texts=texts)
        before = places(store)
        result = settle(store, **SETTINGS)
        after = places(store)
        statuses = {key.rsplit("/", 1)[1]: place[1] for key, place in after.items()}
        assert statuses == {**dict.fromkeys(first, "unchanged"), "b3": "near_duplicate"}  # near A, which represents B
        assert result.records == sum(before[key] != after[key] for key in after)
        assert f"{result.records} URL record(s) written again" in str(result)
        assert result.affected == 5  # A, B, B2, B3, D: not X nor X2
        assert (result.exact_duplicate, result.near_duplicate) == reported_split(store) == (1, 4)


def test_an_honoured_canonical_stays_with_its_target(backend, tmp_path):
    """C declares B its canonical and is near B, not A (the chain A~B~C): the crawl honours it
    and C joins B's cluster, which A represents. Settling keeps it there, pointing to B, in
    every order in which B comes before C (the crawl decides a page once its canonical target
    is known)."""
    states = []
    for n, order in enumerate(o for o in permutations(["a", "b", "c", "x"]) if o.index("b") < o.index("c")):
        with backend(str(tmp_path / f"s{n}"), PARAMS) as store:
            store.begin_run()
            index = ContentIndex(store, store.run, **SETTINGS)
            for name in order:
                text, target = TEXTS[name], url("b") if name == "c" else None
                index.ingest(Document(url(name), url(name), fingerprint(text), raw_hash(text.encode()), text=text,
                                      canonical_key=target, canonical_url=target))
            settle(store, **SETTINGS)
            c = get_url(store, url("c"))
            assert c.canonical_alias and c.reason == "rel_canonical" and c.duplicate_of == url("b"), order
            assert c.cluster_id == get_url(store, url("b")).cluster_id, order
            assert {d["url"] for d in export.documents(store)} == {url("a"), url("x")}, order
            states.append(settled_state(store))
    assert len(states) == 12 and all(state == states[0] for state in states[1:])


def test_one_entry_point_settles_the_clusters_then_the_chunks(backend, tmp_path):
    """settle_store, which a crawl's close, ``ingest`` and ``scrapy dedup settle`` call: the
    chunk statuses follow when settling moved a representative, with DEDUP_CHUNKS or in a store
    that keeps chunks; not when nothing moved and none are owed."""
    from types import SimpleNamespace

    from scrapy_dedup.decide.settle import settle_store

    config = SimpleNamespace(**SETTINGS, authority=(), chunks=True, chunk_rules=None)
    with backend(str(tmp_path / "s"), PARAMS) as store:
        store.begin_run()
        ingest(store, ["c", "b", "a", "x"])  # online, C is chained to A through B
        done = settle_store(store, config)
        assert done.clusters.revised > 0 and done.clusters.rewritten > 0
        assert done.chunks is not None and done.chunks.documents == done.clusters.clusters == 3
        again = settle_store(store, config)
        assert again.clusters.rewritten == 0 and again.chunks is None
        # a store that keeps chunks has them follow its clusters, DEDUP_CHUNKS or not
        ingest(store, ["a+"], texts={"a+": TEXTS["a"] + " and one more line"})  # takes A's place
        later = settle_store(store, SimpleNamespace(**vars(config) | {"chunks": False}))
        assert later.clusters.rewritten > 0 and later.chunks is not None
        # the chunk statuses alone (a shared store's crawl): none owed, nothing moved
        assert settle_store(store, config, clusters=False) == type(done)()


def test_the_feed_id_is_provisional_and_the_settled_one_named_after_the_representative(backend, tmp_path):
    """What the docs say of ``document_id``: B founds a cluster, A (longer, near B) takes it over;
    A's item carries the founding id, B's, and the export, once settled, names the document after
    A's URL key."""
    with backend(str(tmp_path / "s"), PARAMS) as store:
        store.begin_run()
        index = ContentIndex(store, store.run, **SETTINGS)
        items = {}
        for name in ("b", "a"):
            text = TEXTS[name]
            decision = index.ingest(Document(url(name), url(name), fingerprint(text), raw_hash(text.encode()), text=text))
            items[name] = decision.as_item_field()
        scope = get_url(store, url("a")).scope
        assert items["a"]["supersedes"] == [url("b")]
        assert items["a"]["document_id"] == items["b"]["document_id"] == cluster_id_for(scope, url("b"))
        settle(store, **SETTINGS)
        (document,) = export.documents(store)
        assert document["url"] == url("a") and document["document_id"] == cluster_id_for(scope, url("a"))


def _tangled_documents(seed: int) -> tuple[list, dict[str, bytes]]:
    """Documents in two scopes whose candidate keys cross: families sharing MinHash bands,
    pages near a family by their SimHash only (no band in common), pages sharing a SimHash
    block far beyond the distance, copies of one text (in one scope, and in both), short
    texts (no keys), and honoured rel=canonical declarations, within a scope and across."""
    import dataclasses

    from scrapy_dedup.core.records import UrlRecord

    rng = random.Random(seed)
    records, minhashes = [], {}
    for family in range(40):
        scope = "" if family % 3 else "restricted"
        simhash, signature = rng.getrandbits(64), rng.randbytes(256)
        for member in range(rng.randint(1, 9)):
            key = f"http://h/{family}/{member}"
            bits = rng.sample(range(64), rng.choice([0, 1, 2, 3, 5, 9]))
            near_simhash = simhash ^ sum(1 << b for b in bits)
            slots = bytearray(signature if member % 4 else rng.randbytes(256))  # a quarter: no band shared
            for slot in rng.sample(range(256), rng.randint(0, 60)):
                slots[slot] = rng.randrange(256)
            content = f"text-{family}-{member}" if rng.random() > 0.15 else f"text-{family}-0"
            records.append(UrlRecord(key, key, scope=scope, content_hash=content, simhash=near_simhash,
                                     tokens=rng.choice([10, 300, 300, 300]), text_length=rng.randrange(1000, 1100),
                                     first_run=rng.randint(1, 2)))
            minhashes[key] = bytes(slots)
    for record in records[::5]:  # the same text and fingerprints in the other scope
        twin = dataclasses.replace(record, key=record.key + "/twin", url=record.url + "/twin",
                                   scope="restricted" if record.scope == "" else "")
        records.append(twin)
        minhashes[twin.key] = minhashes[record.key]
    for record in rng.sample(records, 12):
        target = rng.choice(records)
        if target is not record:
            record.canonical_alias, record.duplicate_of = True, target.key
    return records, minhashes


def test_settling_group_by_group_decides_as_the_whole_order_does(monkeypatch):
    """Settling takes the documents one group of connected candidates after another: the
    clusters are those of one pass over the whole representative order."""
    import numpy as np
    import xxhash

    from scrapy_dedup.decide import settle as settling

    def near(a, b):  # any pairwise test: it decides nothing of which documents are compared
        pair = "\0".join(sorted((a.key, b.key))).encode()
        return xxhash.xxh64_intdigest(pair) % 4 != 0, (a.simhash ^ b.simhash).bit_count(), None

    def clusters(records, minhashes):
        found = settling.settle_clusters(records, near, minhash_of=minhashes.get, min_tokens=50, max_distance=3)
        return [(s.representative.key, [(m.key, gap) for m, gap, _ in s.members]) for s in found]

    def one_pass(join, records):  # one group a scope: the whole order, scope by scope
        scopes = sorted({r.scope for r in records})
        return np.array([scopes.index(r.scope) for r in records])

    for seed in range(8):
        records, minhashes = _tangled_documents(seed)
        if seed % 2:  # one scope (the keys are sorted alone), or two
            records = [r for r in records if r.scope == ""]
        grouped = clusters(records, minhashes)
        join = settling._KeyJoin(records, partial(settling._each, minhashes.get), 50, 3)
        sizes = np.bincount(join.groups(records))
        assert sum(sizes > 1) > 8 and sum(len(m) for _, m in grouped) > 30  # many groups, many merges
        with monkeypatch.context() as m:
            m.setattr(settling._KeyJoin, "groups", one_pass)
            assert grouped == clusters(records, minhashes)
            assert grouped == clusters(records[::-1], minhashes)


def test_a_document_near_no_other_is_settled_without_reading_its_text(backend, tmp_path, monkeypatch):
    """Only the documents of a group of candidates are compared: settling reads the kept text
    and the MinHash of those (the chain, B2 and the pages near them), none of X's."""
    with backend(str(tmp_path / "s"), PARAMS) as store:
        store.begin_run()
        ingest(store, orders()[0])
        read: list[str] = []
        many = type(store).get_many

        def get_many(self, table, keys):
            read.extend(f"{table}:{key}" for key in keys)
            return many(self, table, keys)

        monkeypatch.setattr(type(store), "get_many", get_many)
        settle(store, **SETTINGS, incremental=False)
        assert {f"text:{url(name)}" for name in "abcde"} <= set(read)
        assert f"text:{url('x')}" not in read


def test_the_minhashes_are_read_in_the_order_the_documents_come_in():
    """The documents are settled in representative order, but their MinHashes are read in the
    order they are given in: a store's scan gives them in its key order, where neighbours
    share a table block (random reads of a large store read a block each)."""
    from scrapy_dedup.decide import settle as settling

    records, minhashes = _tangled_documents(3)
    given = sorted(records, key=lambda r: r.key)
    asked: list[str] = []

    def read(chunk):
        asked.extend(r.key for r in chunk)
        return [minhashes.get(r.key) for r in chunk]

    never = lambda a, b: (False, None, None)  # noqa: E731
    found = settling.settle_clusters(given, never, minhash_of=minhashes.get, min_tokens=50, max_distance=3,
                                     minhashes=read)
    assert asked == [r.key for r in given]
    ordered = [s.representative.key for s in found]
    assert ordered != sorted(ordered)  # the representative order is not the key order
    assert found == settling.settle_clusters(records, never, minhash_of=minhashes.get, min_tokens=50, max_distance=3)


def test_a_settle_runs_without_the_cyclic_garbage_collector(backend, tmp_path, monkeypatch):
    """A settle holds the whole store's records until it ends and makes no garbage cycles: the
    collector is off while it runs (each collection went through them all again), and as it
    was after."""
    import gc

    from scrapy_dedup.decide import settle as settling

    seen: list[bool] = []
    record_changes = settling.record_changes

    def recording(store, records):
        seen.append(gc.isenabled())
        return record_changes(store, records)

    monkeypatch.setattr(settling, "record_changes", recording)
    with backend(str(tmp_path / "s"), PARAMS) as store:
        store.begin_run()
        ingest(store, orders()[0])
        assert gc.isenabled()
        settle(store, **SETTINGS, incremental=False)
        assert seen == [False] and gc.isenabled()
        gc.disable()
        try:
            settle(store, **SETTINGS, incremental=False)
            assert seen == [False, False] and not gc.isenabled()
        finally:
            gc.enable()
