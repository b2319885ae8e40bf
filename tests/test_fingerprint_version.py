"""A change of tokenization is a change of stored fingerprints: a store built with the previous
tokenizer is refused, never mixed."""

from __future__ import annotations

import pytest

from scrapy_dedup.core.fingerprints import FINGERPRINT_PARAMS
from scrapy_dedup.store import IncompatibleStore
from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.records import get_minhash, put_text


def test_a_store_of_the_punctuation_attached_tokenizer_is_refused(tmp_path):
    old = {**FINGERPRINT_PARAMS, "tokenizer_version": 1}
    old.pop("tokens")  # the 0.1 params had no description of the tokens
    LevelDBStore(str(tmp_path / "s"), {"fingerprint": old}).close()
    with pytest.raises(IncompatibleStore, match=r"'tokenizer_version': 1\b.*'tokenizer_version': 2\b"):
        LevelDBStore(str(tmp_path / "s"), {"fingerprint": dict(FINGERPRINT_PARAMS)})


def test_a_store_of_the_token_minhash_is_refused(tmp_path):
    """Fingerprint version 2 took the MinHash over tokens (one per kana or kanji); version 3
    over words."""
    old = {**FINGERPRINT_PARAMS, "version": 2}
    old.pop("minhash_words")
    LevelDBStore(str(tmp_path / "s"), {"fingerprint": old}).close()
    with pytest.raises(IncompatibleStore, match=r"'version': 2\b.*'version': 4\b"):
        LevelDBStore(str(tmp_path / "s"), {"fingerprint": dict(FINGERPRINT_PARAMS)})


def test_a_store_of_the_clause_minhash_is_refused(tmp_path):
    """Fingerprint version 3 took a run of Han or kana as one word; version 4 one character."""
    old = {**FINGERPRINT_PARAMS, "version": 3, "minhash_words": "\\w+ runs of the canonical text"}
    LevelDBStore(str(tmp_path / "s"), {"fingerprint": old}).close()
    with pytest.raises(IncompatibleStore, match=r"'version': 3\b.*'version': 4\b") as refused:
        LevelDBStore(str(tmp_path / "s"), {"fingerprint": dict(FINGERPRINT_PARAMS)})
    # an upgraded crawl says what brings the store to this version (the doc's way, not a new store)
    path = str(tmp_path / "s")
    assert f"run `scrapy dedup migrate --store {path}`" in str(refused.value)
    assert f"`scrapy dedup settle --full --store {path}`" in str(refused.value)


def test_a_store_of_newer_fingerprints_is_not_told_to_migrate(tmp_path):
    newer = {**FINGERPRINT_PARAMS, "version": FINGERPRINT_PARAMS["version"] + 1}
    LevelDBStore(str(tmp_path / "s"), {"fingerprint": newer}).close()
    with pytest.raises(IncompatibleStore) as refused:
        LevelDBStore(str(tmp_path / "s"), {"fingerprint": dict(FINGERPRINT_PARAMS)})
    assert "migrate" not in str(refused.value)


def test_a_store_of_the_token_minhash_is_migrated_from_its_kept_texts(tmp_path):
    """``scrapy dedup migrate`` fingerprints the kept texts again, in a store of this format."""
    from scrapy_dedup.core.fingerprints import fingerprint, raw_hash
    from scrapy_dedup.decide.index import ContentIndex, Document
    from scrapy_dedup.store.leveldb.migrate import migrate_store

    text = "設定ファイルはサービスの起動時に読み込まれ、そのファイルには開くポートが書かれています。" * 8
    path = str(tmp_path / "s")
    old = {**FINGERPRINT_PARAMS, "version": 2}
    old.pop("minhash_words")
    with LevelDBStore(path, {"fingerprint": old}) as store:
        store.begin_run()
        index = ContentIndex(store, 1, max_distance=3, min_jaccard=0.8, min_tokens=50)
        fp = fingerprint(text)
        stale = Document(key="http://h/a", url="http://h/a", fingerprint=fp, raw_hash=raw_hash(b"a"), text=text)
        stale.fingerprint = type(fp)(fp.content_hash, fp.simhash, bytes(len(fp.minhash)), fp.tokens, fp.length)
        index.ingest(stale)
        with store.batch() as batch:
            put_text(batch, "http://h/a", text)
    migration = migrate_store(path)
    assert migration.rebuilt
    with LevelDBStore(path, {"fingerprint": dict(FINGERPRINT_PARAMS)}) as store:
        assert get_minhash(store, "http://h/a") == fingerprint(text).minhash
    assert not migrate_store(path).rebuilt  # done once


def test_the_settle_after_a_migration_decides_every_pair_again(tmp_path):
    """Migrated fingerprints can match where the old ones did not; the next settle, a plain
    ``scrapy dedup settle`` or a crawl's own, decides every pair again. Before, it found every
    cluster as it had left it and settled nothing: two near copies stayed apart until
    ``settle --full``."""
    from scrapy_dedup.core.fingerprints import Fingerprint, fingerprint, raw_hash
    from scrapy_dedup.decide.index import ContentIndex, Document
    from scrapy_dedup.decide.settle import settle
    from scrapy_dedup.store.leveldb.migrate import migrate_store
    from scrapy_dedup.store.records import iter_clusters

    near = {"max_distance": 3, "min_jaccard": 0.8, "min_tokens": 50}
    words = [f"word{i % 97} topic{i % 13}" for i in range(150)]
    texts = {"http://h/a": " ".join(words), "http://h/b": " ".join([*words[:75], "edited", *words[76:]])}
    path = str(tmp_path / "s")
    old = {**FINGERPRINT_PARAMS, "version": 3, "minhash_words": "\\w+ runs of the canonical text"}
    with LevelDBStore(path, {"fingerprint": old}) as store:
        store.begin_run()
        index = ContentIndex(store, 1, **near)
        for key, text in texts.items():
            fp = fingerprint(text)
            if key.endswith("b"):  # what the old definition made of it: nothing near a
                fp = Fingerprint(fp.content_hash, fp.simhash ^ (2**64 - 1), bytes(len(fp.minhash)), fp.tokens, fp.length)
            index.ingest(Document(key=key, url=key, fingerprint=fp, raw_hash=raw_hash(key.encode()), text=text))
        assert settle(store, **near).clusters == 2
    assert migrate_store(path).rebuilt
    with LevelDBStore(path, {"fingerprint": dict(FINGERPRINT_PARAMS)}) as store:
        result = settle(store, **near)
        assert result.affected == 2
        assert [c.representative for c in iter_clusters(store)] == ["http://h/a"]
