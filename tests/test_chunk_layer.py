"""The chunk layer on every store backend: statuses while a crawl runs, and settled at its end."""

import json

import pytest

from scrapy_dedup.core.records import Cluster
from scrapy_dedup.decide.chunk_layer import ChunkLayer
from scrapy_dedup.store.base import BOILERPLATE, BOILERPLATE_GROUP, CHUNK_EXACT, CHUNKS
from scrapy_dedup.store.records import put_cluster, put_text

PARAMS = {"fingerprint": {"version": 1}, "max_distance": 3}

PREAMBLE = (
    "To install Harbor run pip install harbor-client in a virtual environment, then run harbor init in "
    "the directory of your project. The command writes a configuration file with one source, the local "
    "documents folder, and an index in the data directory. Harbor needs Python 3.10 or newer, about two "
    "gigabytes of free disk for a medium corpus, and network access the first time to fetch its models. "
    "On a laptop the first index of ten thousand pages takes about twenty minutes; later runs only read "
    "what changed since the last one, so they finish in a few seconds. If the install fails behind a "
    "proxy, set the usual HTTPS_PROXY variable before you run pip, and ask your administrator for the "
    "certificate bundle of the proxy."
)
HELPFUL = "Was this page helpful? Yes / No"


def body(topic: str, n: int = 100) -> str:
    return " ".join(f"{topic}{i}" for i in range(n)) + "."


def pages() -> dict[str, str]:
    """Four pages of one host: two share the preamble, three the helpful line, one has a near copy
    of the preamble (one word changed)."""
    near = PREAMBLE.replace("two gigabytes", "three gigabytes")
    return {
        "http://h/a": f"{PREAMBLE}\n{body('alpha')}\n{HELPFUL}",
        "http://h/b": f"{PREAMBLE}\n{body('beta')}\n{HELPFUL}",
        "http://h/c": f"{near}\n{body('gamma')}\n{HELPFUL}",
        "http://h/d": f"{body('delta')}\nSomething else entirely on this page.",
    }


@pytest.fixture
def store(backend, store_path):
    with backend(store_path, PARAMS) as s:
        yield s


def crawl(store, order: list[str], layer: ChunkLayer | None = None) -> ChunkLayer:
    """Record the pages as a crawl would, in ``order``, each its own cluster."""
    layer = layer or ChunkLayer(store)
    texts = pages()
    for n, url in enumerate(order):
        with store.batch() as b:
            put_text(b, url, texts[url])
            put_cluster(b, Cluster(f"{n + 1:016x}", url, url, len(texts[url]), 1))
        layer.record(url, url, "", layer.chunk(texts[url], url, url))
    return layer


def statuses(store) -> dict[tuple[str, str], tuple[str, str | None]]:
    text = {url: t for url, t in pages().items()}
    out = {}
    for key, raw in store.scan(CHUNKS):
        for row in json.loads(raw)["chunks"]:
            chunk_id, _, start, end, _, _, _, status, dup, source = row
            out[(key, text[key][start:end][:20])] = (status, source)
    return out


def test_live_statuses_are_those_known_when_decided(store):
    layer = crawl(store, ["http://h/b", "http://h/a"])
    rows = layer.get_chunks("http://h/a")
    first = rows[0]
    assert first.status == "exact_duplicate" and first.source_key == "http://h/b"
    assert first.duplicate_of == layer.get_chunks("http://h/b")[0].chunk_id
    # nothing learned yet: the helpful line is in the content chunks
    assert all(r.status != "boilerplate" for r in rows)


def test_settle_learns_boilerplate_and_orders_sources(store):
    layer = crawl(store, ["http://h/c", "http://h/b", "http://h/d", "http://h/a"])
    assert layer.owed
    result = layer.settle()
    assert not layer.owed
    assert result.documents == 4 and result.boilerplate == 1 and result.revised > 0
    s = statuses(store)
    # first source in representative order (first-seen run, then URL key): /a, not /c or /b
    assert s[("http://h/a", PREAMBLE[:20])] == ("new", None)
    assert s[("http://h/b", PREAMBLE[:20])] == ("exact_duplicate", "http://h/a")
    assert s[("http://h/c", PREAMBLE[:20])] == ("near_duplicate", "http://h/a")
    for url in ("http://h/a", "http://h/b", "http://h/c"):
        assert s[(url, HELPFUL[:20])] == ("boilerplate", None)
    group = json.loads(store.get(BOILERPLATE_GROUP, "h"))
    assert group["pages"] == 4 and group["threshold"] == 3 and len(group["keys"]) == 1
    learned = [json.loads(v) for _, v in store.scan(BOILERPLATE)]
    helpful = [v for v in learned if v["pages"] == 3]
    assert helpful == [{"pages": 3, "text": "was this page helpful? yes / no", "example_url": "http://h/a"}]


def test_settled_statuses_do_not_depend_on_arrival_order(backend, tmp_path):
    results = []
    for n, order in enumerate([["http://h/a", "http://h/b", "http://h/c", "http://h/d"],
                               ["http://h/d", "http://h/c", "http://h/b", "http://h/a"]]):  # fmt: skip
        with backend(str(tmp_path / f"s{n}"), PARAMS) as store:
            # every page first seen in run 1: the URL key decides
            crawl(store, order).settle()
            results.append(statuses(store))
    assert results[0] == results[1]


def test_a_second_settle_changes_nothing_and_the_next_crawl_starts_with_the_boilerplate(store):
    crawl(store, ["http://h/a", "http://h/b", "http://h/c", "http://h/d"]).settle()
    before = statuses(store)
    layer = ChunkLayer(store)
    assert layer.settle().revised == 0
    assert statuses(store) == before
    # a new page of the host is decided with what the last crawl learned
    text = f"{body('epsilon')}\n{HELPFUL}"
    rows = layer.record("http://h/e", "http://h/e", "", layer.chunk(text, "http://h/e", "http://h/e"))
    assert [r.status for r in rows] == ["new", "boilerplate"]


def test_settle_drops_what_non_representatives_left(store):
    layer = crawl(store, ["http://h/a", "http://h/b"])
    layer.record("http://h/gone", "http://h/gone", "", layer.chunk(pages()["http://h/a"], "http://h/gone", "http://h/gone"))
    layer.settle()
    assert store.get(CHUNKS, "http://h/gone") is None
    assert all(not v.startswith(b"http://h/gone") for _, v in store.scan(CHUNK_EXACT))


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"DEDUP_CHUNKS": True, "DEDUP_KEEP_TEXT": False}, "DEDUP_CHUNKS needs DEDUP_KEEP_TEXT"),
        ({"DEDUP_BOILERPLATE_SHARE": 1.5}, "DEDUP_BOILERPLATE_SHARE must be in (0, 1]"),
        ({"DEDUP_BOILERPLATE_MIN_PAGES": 1}, "DEDUP_BOILERPLATE_MIN_PAGES must be at least 2"),
        ({"DEDUP_CHUNK_WORDS": 0}, "DEDUP_CHUNK_WORDS must be at least 1"),
    ],
)
def test_chunk_settings_are_checked_at_start(settings, message):
    from scrapy.settings import Settings

    from scrapy_dedup.crawl.settings import DedupConfig

    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        DedupConfig.from_settings(Settings(settings))


def test_chunk_settings_reach_the_config():
    from scrapy.settings import Settings

    from scrapy_dedup.crawl.settings import DedupConfig

    config = DedupConfig.from_settings(Settings({
        "DEDUP_CHUNKS": "true", "DEDUP_CHUNK_WORDS": 150, "DEDUP_BOILERPLATE_MIN_PAGES": 4,
        "DEDUP_BOILERPLATE_SHARE": 0.3, "DEDUP_BOILERPLATE_BY_PATH": True,
    }))  # fmt: skip
    rules = config.chunk_rules
    assert (config.chunks, rules.max_words, rules.min_pages, rules.share, rules.by_path) == (True, 150, 4, 0.3, True)
    assert (rules.min_tokens, rules.min_jaccard, rules.max_distance) == (
        config.min_tokens, config.min_jaccard, config.max_distance
    )
    assert DedupConfig.from_settings(Settings()).chunks is False


def test_boilerplate_groups_in_memory_are_bounded(store, monkeypatch):
    """A crawl of many hosts keeps the learned lines of the most recently used groups only; a
    group read again after it left memory comes back from the store."""
    import scrapy_dedup.decide.chunk_layer as chunk_layer

    monkeypatch.setattr(chunk_layer, "BOILERPLATE_GROUPS_KEPT", 3)
    layer = crawl(store, ["http://h/a", "http://h/b", "http://h/c", "http://h/d"])
    layer.settle()
    fresh = ChunkLayer(store)
    learned = fresh.boilerplate_keys("h")
    assert learned  # the preamble and the helpful line
    for n in range(10):
        fresh.boilerplate_keys(f"other{n}.example")
        assert len(fresh._learned) <= 3
    assert "h" not in fresh._learned
    assert fresh.boilerplate_keys("h") == learned


def test_settling_reads_only_band_rows_it_has_written(store, monkeypatch):
    """Settling empties the chunk bands and rebuilds them in order: a row it has not written yet
    is empty, so it is not read (a bit of its filter set by another row may still cost a read),
    and the statuses are those of reading every row."""
    import scrapy_dedup.decide.chunk_layer as chunk_layer
    from scrapy_dedup.store.base import CHUNK_BANDS

    crawl(store, ["http://h/c", "http://h/b", "http://h/d", "http://h/a"])
    reads: list[str] = []
    get = store.get

    def counted(table, key):
        if table == CHUNK_BANDS:
            reads.append(key)
        return get(table, key)

    monkeypatch.setattr(store, "get", counted)
    ChunkLayer(store).settle()
    filtered, settled = len(reads), statuses(store)
    monkeypatch.setattr(chunk_layer._Written, "__contains__", lambda self, owner: True)  # every row read
    reads.clear()
    ChunkLayer(store).settle()
    assert statuses(store) == settled
    assert len(reads) > 100 and filtered * 4 < len(reads)


def test_the_settling_filter_knows_every_row_added_and_stays_bounded():
    from scrapy_dedup.decide.chunk_layer import _Written

    written = _Written(10_000)
    owners = [f"{n:04x}:{n % 32}:{n * 2654435761 % 2**64:016x}" for n in range(10_000)]
    for owner in owners[::2]:
        written.add(owner)
    assert all(owner in written for owner in owners[::2])
    assert sum(owner in written for owner in owners[1::2]) < 0.1 * len(owners[1::2])
    assert len(_Written(10**12)._bits) == 32 * 2**20
