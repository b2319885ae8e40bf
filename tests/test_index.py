"""Content-layer decisions against each real store backend (LevelDB in a temporary directory, memory)."""

import random

import pytest

from scrapy_dedup.core.fingerprints import fingerprint, raw_hash
from scrapy_dedup.decide.index import ContentIndex, Document
from scrapy_dedup.store.base import EXACT, MEMBERS
from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.records import (
    find_exact,
    get_cluster,
    get_minhash,
    get_text,
    get_url,
    iter_clusters,
    members_of,
    set_members,
)

WORDS = (
    "crawler index page query token shingle server client cache header body anchor link table column row "
    "release version manual chapter section figure example note warning option setting value default "
    "function method class module package import export buffer stream socket thread process memory disk"
).split()


def prose(seed: int, n: int = 300) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) + ("." if rng.random() < 0.1 else "") for _ in range(n))


def doc(url: str, text: str, **kw) -> Document:
    return Document(key=url, url=url, fingerprint=fingerprint(text), raw_hash=raw_hash(text.encode()), **kw)


@pytest.fixture
def store(backend, store_path):
    with backend(store_path, {"v": 1}) as s:
        s.begin_run()
        yield s


def make_index(store, run=1, **kw):
    return ContentIndex(store, run, max_distance=3, min_jaccard=0.8, min_tokens=50, **kw)


def test_new_then_exact_duplicate(store):
    index = make_index(store)
    text = prose(1)
    first = index.ingest(doc("http://h/b", text))
    assert first.status == "new" and first.is_representative
    second = index.ingest(doc("http://h/c", "  " + text.upper().replace(" ", "\u00a0 ") + "\r\n"))
    assert second.status == "exact_duplicate"
    assert not second.is_representative
    assert second.canonical_url == "http://h/b"
    assert second.cluster_id == first.cluster_id
    assert get_url(store, "http://h/c").reason == "exact_content"


def test_a_cluster_of_one_has_no_member_set_and_a_replaced_representative_enters_it(store):
    index = make_index(store)
    text = prose(2)
    first = index.ingest(doc("http://h/z", text))
    assert set_members(store, MEMBERS, first.cluster_id) == []
    assert members_of(store, first.cluster_id) == ["http://h/z"]
    assert index.ingest(doc("http://h/a", text)).is_representative  # the smaller URL takes over
    assert sorted(k for k, _ in set_members(store, MEMBERS, first.cluster_id)) == ["http://h/a", "http://h/z"]
    cluster = get_cluster(store, first.cluster_id)
    assert members_of(store, cluster) == members_of(store, first.cluster_id) == ["http://h/a", "http://h/z"]


def test_smaller_url_takes_over_with_supersedes(store):
    index = make_index(store)
    text = prose(2)
    index.ingest(doc("http://h/z", text))
    decision = index.ingest(doc("http://h/a", text))
    assert decision.is_representative
    assert decision.supersedes == ["http://h/z"]
    assert get_url(store, "http://h/z").duplicate_of == "http://h/a"
    assert get_cluster(store, decision.cluster_id).representative == "http://h/a"


def test_near_duplicate_added_sentence(store):
    index = make_index(store)
    text = prose(3)
    index.ingest(doc("http://h/a", text))
    decision = index.ingest(doc("http://h/b", text + " one more sentence about the release date."))
    assert decision.status == "near_duplicate"
    # the longer copy is the more complete one and represents the cluster
    assert decision.is_representative and decision.supersedes == ["http://h/a"]


def test_distinct_pages_stay_apart(store):
    index = make_index(store)
    statuses = [index.ingest(doc(f"http://h/{i}", prose(100 + i))).status for i in range(20)]
    assert statuses == ["new"] * 20
    assert len(list(iter_clusters(store))) == 20


def test_short_pages_are_exact_only(store):
    index = make_index(store)
    index.ingest(doc("http://h/a", "contact us at the front desk"))
    decision = index.ingest(doc("http://h/b", "contact us at the back desk"))
    assert decision.status == "new"


def test_empty_text_is_skipped(store):
    decision = make_index(store).ingest(doc("http://h/a", " \u200b\n "))
    assert decision.status == "skipped_empty"
    assert get_url(store, "http://h/a").status == "skipped_empty"


def test_recrawl_unchanged_updated_and_forgotten(store):
    index = make_index(store)
    a, b = prose(5), prose(6)
    index.ingest(doc("http://h/a", a))
    index.ingest(doc("http://h/b", b))
    index.ingest(doc("http://h/c", b))  # exact duplicate of b
    store.begin_run()
    index = make_index(store, run=2)
    assert index.ingest(doc("http://h/a", a)).status == "unchanged"
    updated = index.ingest(doc("http://h/a", prose(7)))
    assert updated.status == "updated" and updated.is_representative
    assert get_url(store, "http://h/a").status == "updated"  # the reports read what the item said
    assert find_exact(store, "", fingerprint(a).content_hash) is None
    promoted = index.forget("http://h/b", 404)
    assert promoted == "http://h/c"
    assert get_url(store, "http://h/b").status == "deleted"
    cluster = get_cluster(store, get_url(store, "http://h/c").cluster_id)
    assert cluster.representative == "http://h/c" and cluster.size == 1
    assert index.forget("http://h/c", 410) is None
    assert list(iter_clusters(store)) == [get_cluster(store, updated.cluster_id)]


def test_a_page_fetched_again_in_the_job_that_first_saw_it_keeps_its_status(store):
    # a killed run's page fetched again by the run that resumes it: run 2 goes on with job 1
    text = prose(8)
    make_index(store).ingest(doc("http://h/a", text))
    make_index(store).ingest(doc("http://h/b", text))
    store.begin_run()
    again = make_index(store, run=1)
    assert again.ingest(doc("http://h/a", text)).status == "unchanged"  # the text, as recorded
    again.ingest(doc("http://h/b", text))
    assert [get_url(store, k).status for k in ("http://h/a", "http://h/b")] == ["new", "exact_duplicate"]
    # the next job finds them unchanged
    assert make_index(store, run=2).ingest(doc("http://h/b", text)).status == "unchanged"
    assert get_url(store, "http://h/b").status == "unchanged"


def test_scopes_never_merge(store):
    index = make_index(store)
    text = prose(8)
    index.ingest(doc("http://h/public", text, scope="public"))
    decision = index.ingest(doc("http://h/private", text, scope="acl:staff"))
    assert decision.status == "new"


def test_canonical_honored_and_mismatch(store):
    index = make_index(store)
    text = prose(9)
    index.ingest(doc("http://h/target", text))
    honored = index.ingest(
        doc("http://h/p", text + " printed", canonical_key="http://h/target", canonical_url="http://h/target")
    )
    assert honored.canonical == "honored" and honored.reason == "rel_canonical"
    assert not honored.is_representative  # a page that names its canonical never represents it
    index.ingest(doc("http://h/page1", prose(10)))
    mismatch = index.ingest(
        doc("http://h/page2", prose(11), canonical_key="http://h/page1", canonical_url="http://h/page1")
    )
    assert mismatch.canonical == "mismatch" and mismatch.status == "new"
    assert get_url(store, "http://h/page2").canonical_mismatch == "http://h/page1"


def test_representative_independent_of_order(store_path, tmp_path):
    texts = {f"http://h/{c}": prose(12) + (" extra words here" if c == "m" else "") for c in "qmaz"}
    reps = set()
    for order in (sorted(texts), sorted(texts, reverse=True)):
        with LevelDBStore(str(tmp_path / "-".join(o[-1] for o in order)), {"v": 1}) as s:
            s.begin_run()
            index = make_index(s)
            for url in order:
                index.ingest(doc(url, texts[url]))
            reps.add(tuple(sorted(c.rep_url for c in iter_clusters(s))))
    assert reps == {("http://h/m",)}


def test_a_copy_that_skipped_extraction_takes_over_with_the_kept_text(store):
    """A byte-identical copy under a better URL is decided from recalled fingerprints, without
    text; when it takes over, the cluster's text stays kept (for export and chunks)."""
    index = make_index(store)
    text = prose(3)
    first = doc("http://h/z", text)
    first.text = text
    index.ingest(first)
    copy = doc("http://h/a", text)
    copy.fingerprint = index.recall(copy.raw_hash)
    decision = index.ingest(copy)
    assert decision.is_representative and decision.supersedes == ["http://h/z"]
    assert get_text(store, "http://h/a") == text


def test_recall_skips_extraction_for_known_bodies(store):
    index = make_index(store)
    text = prose(13)
    d = doc("http://h/a", text)
    index.ingest(d)
    recalled = index.recall(d.raw_hash)
    assert recalled is not None and recalled.content_hash == d.fingerprint.content_hash
    assert recalled.minhash == d.fingerprint.minhash
    assert index.recall(raw_hash(b"never seen")) is None


# -- regressions: lifecycle edge cases --------------------------------------------------


def test_a_returning_text_never_takes_over_a_live_cluster(store):
    """A cluster is named after its founder's text; the founder may leave while the cluster lives."""
    index = make_index(store)
    a = prose(20)
    b = a + " " + prose(21, 55)
    c = b + " " + prose(22, 55)
    index.ingest(doc("http://h/a", a))
    index.ingest(doc("http://h/b", b))
    first = index.ingest(doc("http://h/c", c))
    index.forget("http://h/a", 404)
    back = index.ingest(doc("http://h/d", a))
    assert back.status == "new"
    assert back.cluster_id != first.cluster_id
    assert get_cluster(store, first.cluster_id).representative == "http://h/c"
    assert get_cluster(store, back.cluster_id).representative == "http://h/d"
    for cid in {first.cluster_id, back.cluster_id}:
        cluster = get_cluster(store, cid)
        assert cluster.representative in members_of(store, cid)
        assert cluster.size == len(members_of(store, cid))


def test_a_gone_body_is_not_recalled(store):
    index = make_index(store)
    text = prose(23)
    d = doc("http://h/a", text)
    index.ingest(d)
    index.forget("http://h/a", 404)
    assert index.recall(d.raw_hash) is None
    assert index.ingest(doc("http://h/a", text)).status == "new"


def test_forgetting_writes_the_record_with_its_cluster_change(store):
    index = make_index(store)
    index.ingest(doc("http://h/a", prose(24)))
    index.forget("http://h/a", 410)
    record = get_url(store, "http://h/a")
    assert record.status == "deleted" and record.cluster_id is None
    assert list(iter_clusters(store)) == []
    assert get_minhash(store, "http://h/a") is None and get_text(store, "http://h/a") is None


def test_an_updated_representative_hands_its_old_text_to_a_member(store):
    index = make_index(store)
    text = prose(25)
    index.ingest(doc("http://h/b", text))
    index.ingest(doc("http://h/a", text + " extra words here to be longer than b"))
    updated = index.ingest(doc("http://h/a", prose(26)))
    assert updated.status == "updated" and updated.promoted == "http://h/b"
    cluster = get_cluster(store, get_url(store, "http://h/b").cluster_id)
    assert cluster.representative == "http://h/b"


def test_canonical_never_crosses_scopes(store):
    index = make_index(store)
    text = prose(27)
    index.ingest(doc("http://h/public", text, scope="public"))
    decision = index.ingest(
        doc("http://h/members", text, scope="acl:members", canonical_key="http://h/public", canonical_url="http://h/public")
    )
    assert decision.canonical == "mismatch" and decision.status == "new"


def test_canonical_followed_through_a_recorded_redirect(store):
    from scrapy_dedup.decide.frontier import Frontier

    index = make_index(store)
    text = prose(28)
    index.ingest(doc("https://h/a", text))
    Frontier(store, 1).record_redirect([("http://h/a", "http://h/a")], "https://h/a", [301])
    decision = index.ingest(doc("https://h/p", text, canonical_key="http://h/a", canonical_url="http://h/a"))
    assert decision.canonical == "honored" and decision.reason == "rel_canonical"


def test_a_cluster_founded_meanwhile_by_another_process_is_joined(store_path):
    """Two crawl processes on one shared store ingest the same text at once.

    The interleaving is scripted: the other process founds its cluster after this
    one's lookups missed, just before this one claims the hash.
    """
    from scrapy_dedup.store.memory import MemoryStore

    class RacedStore(MemoryStore):
        other = None

        def put_if_absent(self, table, key, value):  # claim_exact: the exact hash's claim
            if table == EXACT and self.other is not None:
                other, self.other = self.other, None
                other()
            return super().put_if_absent(table, key, value)

    text = prose(41)
    try:
        with RacedStore(store_path, {"v": 1}) as s:
            s.begin_run()
            mine, theirs = make_index(s), make_index(s)
            s.other = lambda: theirs.ingest(doc("http://b/page", text))
            decision = mine.ingest(doc("http://a/page", text))
            clusters = list(iter_clusters(s))
            assert len(clusters) == 1
            assert decision.status == "exact_duplicate" and decision.cluster_id == clusters[0].cluster_id
            assert sorted(members_of(s, clusters[0].cluster_id)) == ["http://a/page", "http://b/page"]
    finally:
        MemoryStore.discard(store_path)


def _borderline_pair() -> tuple[str, str]:
    # MinHash estimates 0.80 (a match at min_jaccard 0.8), the exact word 5-shingle Jaccard is 0.796
    base = [f"w{i}" for i in range(400)]
    edited = [f"x{i}" if (i + 1) % 41 == 0 else w for i, w in enumerate(base)]
    return " ".join(base), " ".join(edited)


@pytest.mark.parametrize("keep_text", [True, False])
def test_a_borderline_estimate_is_decided_by_the_kept_texts(store, keep_text):
    a, b = _borderline_pair()

    def page(url: str, body: str, **kw) -> Document:
        kept = doc(url, body, **kw)
        kept.text = body if keep_text else None
        return kept

    index = make_index(store)
    index.ingest(page("http://h/a", a))
    decision = index.ingest(page("http://h/b", b))
    # with both texts kept the exact Jaccard (under 0.8) decides; without them the estimate does
    assert decision.status == ("new" if keep_text else "near_duplicate")
    canonical = index.ingest(page("http://h/c", b, canonical_key="http://h/a", canonical_url="http://h/a"))
    assert canonical.canonical == ("mismatch" if keep_text else "honored")


def test_a_candidate_above_the_threshold_by_estimate_and_below_by_its_kept_text_is_not_merged(store):
    from scrapy_dedup.core.fingerprints import jaccard_estimate, shingle_jaccard

    base = [f"w{i}" for i in range(400)]
    for seed in range(4000):
        rng = random.Random(seed)
        a = " ".join(base)
        b = " ".join(f"x{seed}_{i}" if rng.random() < 0.0245 else w for i, w in enumerate(base))
        if shingle_jaccard(a, b) < 0.8 <= jaccard_estimate(fingerprint(a).minhash, fingerprint(b).minhash):
            break
    else:
        raise AssertionError("no such pair")

    def kept(url: str, text: str) -> Document:
        return Document(key=url, url=url, fingerprint=fingerprint(text), raw_hash=raw_hash(text.encode()), text=text)

    index = make_index(store)
    first = index.ingest(kept("http://h/a", a))
    second = index.ingest(kept("http://h/b", b))
    assert second.status == "new" and second.cluster_id != first.cluster_id
    assert get_url(store, "http://h/b").reason is None
