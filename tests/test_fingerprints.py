"""Fingerprints: pinned values (a silent algorithm change must fail here and bump
FINGERPRINT_PARAMS["version"]), SimHash and MinHash behaviour, and the near_match rule."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import unicodedata

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings, strategies as st

from scrapy_dedup.core import fingerprints as F
from scrapy_dedup.core.fingerprints import (
    DEFAULT_MIN_JACCARD,
    DEFAULT_MIN_TOKENS,
    DISTANCE_JACCARD_SLACK,
    FINGERPRINT_PARAMS,
    NUM_PERM,
    Fingerprint,
    content_hash,
    fingerprint,
    hamming,
    jaccard_estimate,
    minhash,
    narrow_signature,
    near_match,
    raw_hash,
    simhash,
)
from scrapy_dedup.core.text import canonical_text, tokenize

EN = (
    "VACUUM reclaims storage occupied by dead tuples. In normal PostgreSQL operation, tuples that are "
    "deleted or obsoleted by an update are not physically removed from their table."
)
ZH = "RAG 结果去重算法：MinHash 和 SimHash 在检索结果去重中的实战对比。多路召回的一个经典场景是向量召回了文章 A 的版本。"
JA = "東京タワーは、東京都港区芝公園にある総合電波塔です。高さは333メートルで、1958年に完成しました。"

# (content_hash, simhash, xxh3_64 of the MinHash bytes, tokens, length), pinned for fingerprint
# version 4 (one-byte MinHash slots over \w+ words, a word per character of a script without
# spaces) with tokenizer version 2 (word runs, punctuation dropped); versions 2 to 4 changed only
# the MinHash column, versions 3 and 4 only on text with a script written without spaces (on
# text without combining marks, version 4 gives version 2's MinHash again)
PINNED = {
    EN: ("e1fd5bc962633e11db5f08bab80d3268", 0x49C5517084F0B482, "d643246be4267f77", 27, 175),
    ZH: ("4592525f68085da0cc80472a48b67683", 0x4D76F35F3D7B9AB5, "cbc622a069c30e6d", 46, 69),
    JA: ("48cd95dfa5c24ab6c86bc0841067d205", 0x0B0DDCB7AE5751DD, "aee1fceb3d9af138", 42, 51),
}


@pytest.mark.parametrize("text", list(PINNED), ids=["english", "chinese", "japanese"])
def test_pinned_fingerprints(text):
    fp = fingerprint(text)
    assert (fp.content_hash, fp.simhash, xxhash.xxh3_64_hexdigest(fp.minhash), fp.tokens, fp.length) == PINNED[text]
    assert FINGERPRINT_PARAMS["version"] == 4, "pinned values belong to version 4"
    assert FINGERPRINT_PARAMS["tokenizer_version"] == 2, "pinned values belong to tokenizer version 2"


def test_pinned_raw_hash():
    assert raw_hash(b"<html>hello</html>") == "de593c660e812a516b1490ac42598d50"
    assert raw_hash(b"<html>hello</html> ") != raw_hash(b"<html>hello</html>")


def test_fingerprint_agrees_with_the_single_functions():
    for text in [*PINNED, "", "   ", "one", "Straße\u00a0\u200bcafe\u0301 " * 40]:
        fp = fingerprint(text)
        canonical = canonical_text(text)
        assert fp.content_hash == content_hash(text) == xxhash.xxh3_128_hexdigest(canonical.encode())
        assert fp.simhash == simhash(text)
        assert fp.minhash == minhash(text)
        assert fp.tokens == len(tokenize(canonical))
        assert fp.length == len(canonical)


def test_fingerprint_is_frozen_and_slotted():
    fp = fingerprint(EN)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fp.simhash = 0  # type: ignore[misc]
    assert not hasattr(fp, "__dict__")


def test_content_hash_ignores_presentation_only():
    assert content_hash("Hello,\u00a0World\r\n") == content_hash("hello, world")
    assert len(content_hash("x")) == 32


def test_params_are_plain_json_and_match_the_constants():
    params = json.loads(json.dumps(FINGERPRINT_PARAMS))
    assert params["bits"] == 64
    assert params["num_perm"] == NUM_PERM
    assert params["simhash_shingle"] == F.SIMHASH_SHINGLE
    assert params["minhash_shingle"] == F.MINHASH_SHINGLE == 5
    assert {"version", "tokenizer_version", "seeds_id"} <= params.keys()


# -- SimHash ------------------------------------------------------------------------------------


def _words(seed: int, n: int = 300) -> list[str]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(400)]
    return rng.choices(vocab, [1 / (i + 1) for i in range(400)], k=n)  # Zipf-like, like prose


def test_simhash_of_empty_text_is_zero():
    assert simhash("") == 0
    assert simhash(" \n\u200b ") == 0


def test_simhash_one_word_edit_is_close_and_unrelated_text_is_far():
    for seed in range(20):
        words = _words(seed)
        edited = list(words)
        edited[150] = "replaced"
        a, b = simhash(" ".join(words)), simhash(" ".join(edited))
        assert hamming(a, b) <= 8
        assert hamming(a, simhash(" ".join(_words(seed + 1000)))) >= 16


def test_simhash_is_order_sensitive_through_shingles():
    words = [f"t{i}" for i in range(200)]
    assert simhash(" ".join(words)) != simhash(" ".join(reversed(words)))


def test_hamming():
    assert hamming(0, 0) == 0
    assert hamming(0, (1 << 64) - 1) == 64


# -- MinHash ------------------------------------------------------------------------------------


def _shingles(tokens: list[str], k: int = 5) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + k]) for i in range(len(tokens) - k + 1)}


@pytest.mark.parametrize("replaced", [10, 60, 150, 300, 600])
def test_jaccard_estimate_is_within_tolerance_of_exact_jaccard(replaced):
    base = [f"tok{i}" for i in range(1200)]
    other = base[:300] + [f"new{i}" for i in range(replaced)] + base[300 + replaced :]
    a, b = _shingles(base), _shingles(other)
    exact = len(a & b) / len(a | b)
    estimate = jaccard_estimate(minhash(" ".join(base)), minhash(" ".join(other)))
    assert abs(estimate - exact) <= 4 * math.sqrt(exact * (1 - exact) / NUM_PERM) + 0.01


def test_minhash_serialises_compactly():
    sig = minhash(EN)
    assert isinstance(sig, bytes) and len(sig) == NUM_PERM
    assert minhash(EN.upper()) == sig


def test_stored_slots_are_the_low_bytes_of_the_minima():
    # what `scrapy dedup migrate` relies on: narrowing a version-1 signature gives, exactly,
    # the signature this version computes from the same text
    minima = F._minhash_signature(F._shingle_hashes(F._token_hashes(F._token_bytes(EN)), F.MINHASH_SHINGLE), F._PERM_A, F._PERM_B)
    assert minima.dtype == np.dtype("<u4") and len(minima) == NUM_PERM
    assert narrow_signature(minima.tobytes()) == minhash(EN) == fingerprint(EN).minhash
    assert narrow_signature(minhash(EN)) == minhash(EN)
    assert narrow_signature(b"") == b""
    with pytest.raises(ValueError, match="32-bit slots"):
        narrow_signature(bytes(NUM_PERM + 2))


def test_chance_agreements_of_low_bytes_are_taken_out():
    # unrelated texts: their minima differ, yet about 1 slot in 256 agrees on the low byte
    rng = random.Random(11)
    estimates = []
    for _ in range(40):
        a = " ".join(f"a{rng.randrange(10**6)}" for _ in range(400))
        b = " ".join(f"b{rng.randrange(10**6)}" for _ in range(400))
        estimates.append(jaccard_estimate(minhash(a), minhash(b)))
    assert all(e >= 0.0 for e in estimates)
    assert abs(sum(estimates) / len(estimates)) < 0.004  # uncorrected, the mean would be 1/256


def test_jaccard_estimate_edge_cases():
    assert jaccard_estimate(minhash(EN), minhash(EN)) == 1.0
    assert jaccard_estimate(b"", minhash(EN)) == 0.0
    with pytest.raises(ValueError):
        jaccard_estimate(bytes(8), bytes(12))
    assert jaccard_estimate(bytes(NUM_PERM), b"\x01" * NUM_PERM) == 0.0  # clipped, not -1/255


# -- near_match ---------------------------------------------------------------------------------


def _fp(simhash_value: int, equal_slots: int, tokens: int = 500) -> Fingerprint:
    # a signature sharing `equal_slots` of NUM_PERM slots with _REFERENCE
    sig = bytes(equal_slots) + b"\x01" * (NUM_PERM - equal_slots)
    return Fingerprint(content_hash="x", simhash=simhash_value, minhash=sig, tokens=tokens, length=5 * tokens)


_REFERENCE = Fingerprint(content_hash="y", simhash=0, minhash=bytes(NUM_PERM), tokens=500, length=2500)


def test_near_match_on_real_texts():
    words = _words(7, 600)
    edited = list(words)
    edited[100:103] = ["x", "y", "z"]
    a, b = fingerprint(" ".join(words)), fingerprint(" ".join(edited))
    ok, distance, estimate = near_match(a, b)
    assert ok and distance == hamming(a.simhash, b.simhash) and estimate == jaccard_estimate(a.minhash, b.minhash)
    assert not near_match(a, fingerprint(" ".join(_words(8, 600))))[0]


def test_near_match_estimate_alone_decides_at_the_threshold():
    slots = math.ceil(DEFAULT_MIN_JACCARD * NUM_PERM)
    assert near_match(_REFERENCE, _fp(0xFFFF << 48, slots))[0]  # far in SimHash, J_est >= 0.8
    assert not near_match(_REFERENCE, _fp(0xFFFF << 48, slots - 1))[0]


def test_near_match_close_simhash_lowers_the_bar_by_the_slack_only():
    floor_slots = math.ceil((DEFAULT_MIN_JACCARD - DISTANCE_JACCARD_SLACK) * NUM_PERM)
    assert near_match(_REFERENCE, _fp(0b111, floor_slots)) == (True, 3, (floor_slots - 1) / 255)
    assert not near_match(_REFERENCE, _fp(0b1111, floor_slots))[0]  # distance 4
    # identical SimHash with unrelated MinHash: the frequent-shingle collision the floor guards against
    assert not near_match(_REFERENCE, _fp(0, 0))[0]


def test_near_match_parameters():
    fp = _fp(0b11111, 200)  # distance 5, J_est 0.78
    assert not near_match(_REFERENCE, fp)[0]
    assert near_match(_REFERENCE, fp, max_distance=5)[0]
    assert near_match(_REFERENCE, fp, min_jaccard=0.75)[0]


def test_short_pages_are_exact_only():
    short = fingerprint(" ".join(_words(3, DEFAULT_MIN_TOKENS - 1)))
    assert short.tokens == DEFAULT_MIN_TOKENS - 1
    ok, distance, estimate = near_match(short, short)
    assert (ok, distance, estimate) == (False, 0, 1.0)
    assert near_match(short, short, min_tokens=10)[0]


# -- the exact check of borderline pairs ---------------------------------------------------------


def test_shingle_set_hashes_are_pinned():
    # what settling compares pairs on: a change of tokenization or hashing changes settled clusters
    texts = ["Straße ﬁle Ünïcode, 東京の天気は晴れ; naïve café — x_y 42", "", "one", "a b c d e f g", "  \t\n  ",
             "ＡＢＣ def ghi jkl mno pqr"]
    digests = [xxhash.xxh64_hexdigest(F.shingle_set(t).tobytes()) for t in texts]
    # (the first changed with fingerprint version 4: 東京の天気は晴れ is 8 words, no longer 1)
    assert digests == ["945fbe96539f941a", "ef46db3751d8e999", "2ac520854beb931e", "d115760da2c11059",
                       "ef46db3751d8e999", "5cb6f219941453d0"]
    # (the values went without the finaliser once, a bijection: every Jaccard stayed as it was)
    for text in texts:
        mixed = F._fmix64(F.shingle_set(text).copy())
        assert np.array_equal(np.sort(mixed), np.unique(F._shingle_hashes(F._token_hashes(F._word_bytes(text)), 5)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40), st.integers(1, 9))
def test_shingle_hashes_are_the_polynomial_of_each_run(values, size):
    # the runs are built from half-width runs: the same sums as adding one token at a time
    hashes = np.array(values, dtype=np.uint64)
    width = min(size, len(values))
    combine = int(F._COMBINE)
    expected = [sum(values[i + j] * pow(combine, width - 1 - j, 2**64) for j in range(width)) % 2**64
                for i in range(len(values) - width + 1)]
    assert F._shingle_hashes(hashes, size, mix=False).tolist() == expected
    assert np.array_equal(F._shingle_hashes(hashes, size), F._fmix64(np.array(expected, dtype=np.uint64)))
    assert hashes.tolist() == values, "the token hashes are left as they were"


def _regex_shingle_set(text):
    # the definition: \w+ runs of the NFKC, casefolded text without its invisible characters, a
    # character of a script without spaces a word of its own, one regex over the whole of it
    visible = re.sub("[\u200b\u200c\u200d\u2060\ufeff\u00ad]", "", text)
    words = [w.encode("utf-8") for w in F._WORD.findall(unicodedata.normalize("NFKC", visible).casefold())]
    return np.unique(F._shingle_hashes(F._token_hashes(words), F.MINHASH_SHINGLE, mix=False))


# ASCII punctuation and spaces (split in C), and what only the regex tells apart
_WORD_ALPHABET = st.sampled_from("aZ09 _.,-:<>\t\n\r\x0b\x0c\x1c\x1f\x00\u00a0\u2028\u0085\u3000"
                                 "éß\u0130ΣжπØ٣²½ﬁＡ\u0301\u200b\u00ad—“…中ア가\ud800")


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=_WORD_ALPHABET, max_size=60) | st.text(max_size=60))
def test_shingle_set_words_are_the_regex_words(text):
    assert np.array_equal(F.shingle_set(text), _regex_shingle_set(text))


def test_shingle_set_words_split_at_every_ascii_non_word_character():
    for code in range(128):
        text = f"a b{chr(code)}c d e f"
        assert np.array_equal(F.shingle_set(text), _regex_shingle_set(text)), code


def test_shingle_words_drop_the_invisible_characters_the_fingerprints_drop():
    # a soft hyphen or a zero-width space inside a word: the same words for the exact Jaccard as
    # for the MinHash estimate it confirms
    plain = "Die Dokumentation beschreibt die Konfiguration des Servers und seiner Dienste ausführlich"
    hinted = plain.replace("Dokumentation", "Doku\u00admen\u00adta\u00adtion").replace("Konfiguration", "Kon\u200bfiguration")
    assert np.array_equal(F.shingle_set(hinted), F.shingle_set(plain))
    assert F.shingle_jaccard(hinted, plain) == 1.0
    assert F.fingerprint(hinted).minhash == F.fingerprint(plain).minhash


def test_shingle_jaccard_is_the_exact_jaccard_of_the_shingle_sets():
    a = " ".join(f"w{i}" for i in range(100))
    b = a.replace("w50", "x50")  # 5 of 96 shingles change on each side
    assert F.shingle_jaccard(a, a) == 1.0
    assert F.shingle_jaccard(a, b) == 91 / 101
    assert F.shingle_jaccard("", "") == 1.0 and F.shingle_jaccard("a b c d e", "") == 0.0
    # punctuation is not part of a word: a signature and its twin differ by one word per path
    assert F.shingle_jaccard("std::iter::Chain<A, B>", "std :: iter :: Chain < A , B >") == 1.0


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 2**64 - 1) | st.integers(0, 40)), st.sets(st.integers(0, 2**64 - 1) | st.integers(0, 40)))
def test_set_jaccard_is_the_jaccard_of_the_sets(a, b):
    sa, sb = (np.array(sorted(x), dtype=np.uint64) for x in (a, b))
    assert F.set_jaccard(sa, sb) == (len(a & b) / len(a | b) if a or b else 1.0)


def test_with_texts_every_candidate_is_decided_by_the_exact_jaccard():
    base = [f"w{i}" for i in range(400)]
    for step in (40, 60, 150, 200):  # J 0.79, 0.86, 0.95, 0.97
        edited = [f"x{i}" if i % step == 0 else w for i, w in enumerate(base)]
        a, b = " ".join(base), " ".join(edited)
        exact = F.shingle_jaccard(a, b)
        ok, _, value = near_match(fingerprint(a), fingerprint(b), texts=(a, b))
        assert value == exact and ok == (exact >= F.DEFAULT_MIN_JACCARD), step


def _estimate_above_exact_below(seed_range=range(4000)):
    """Two texts whose MinHash estimate is at least DEFAULT_MIN_JACCARD while their exact
    Jaccard is below it (the estimate's error, standard 0.025 at J = 0.8)."""
    base = [f"w{i}" for i in range(400)]
    for seed in seed_range:
        rng = random.Random(seed)
        edited = [f"x{seed}_{i}" if rng.random() < 0.0245 else w for i, w in enumerate(base)]
        a, b = " ".join(base), " ".join(edited)
        exact = F.shingle_jaccard(a, b)
        if exact < F.DEFAULT_MIN_JACCARD <= jaccard_estimate(fingerprint(a).minhash, fingerprint(b).minhash):
            return a, b
    raise AssertionError("no such pair")


def test_a_candidate_above_the_threshold_by_estimate_and_below_by_text_is_not_merged():
    a, b = _estimate_above_exact_below()
    assert near_match(fingerprint(a), fingerprint(b))[0] is True  # the estimate alone merges it
    ok, _, value = near_match(fingerprint(a), fingerprint(b), texts=(a, b))
    assert ok is False and value < F.DEFAULT_MIN_JACCARD


def test_the_exact_check_never_makes_a_short_page_match():
    a, b = "one two three four five six", "one two three four five seven"
    assert near_match(fingerprint(a), fingerprint(b), texts=(a, b))[0] is False
