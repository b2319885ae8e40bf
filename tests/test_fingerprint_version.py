"""A change of tokenization is a change of stored fingerprints: a store built with the previous
tokenizer is refused, never mixed."""

from __future__ import annotations

import pytest

from scrapy_dedup.core.fingerprints import FINGERPRINT_PARAMS
from scrapy_dedup.store import IncompatibleStore
from scrapy_dedup.store.leveldb import LevelDBStore


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
    with pytest.raises(IncompatibleStore, match=r"'version': 2\b.*'version': 3\b"):
        LevelDBStore(str(tmp_path / "s"), {"fingerprint": dict(FINGERPRINT_PARAMS)})
