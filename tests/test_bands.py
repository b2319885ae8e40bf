"""Index keys: SimHash blocks (pigeonhole property) and MinHash LSH bands."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from scrapy_dedup.core.bands import (
    BANDS,
    BLOCK_BITS,
    BLOCKS,
    ROWS,
    band_hashes,
    candidate_probability,
    lsh_threshold,
    simhash_blocks,
)
from scrapy_dedup.core.fingerprints import NUM_PERM, minhash

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


def test_blocks_are_the_four_16_bit_slices():
    fp = 0x0123_4567_89AB_CDEF
    blocks = simhash_blocks(fp)
    assert blocks == (0xCDEF, 0x89AB, 0x4567, 0x0123)
    assert sum(block << (BLOCK_BITS * i) for i, block in enumerate(blocks)) == fp
    assert (BLOCKS, BLOCK_BITS) == (4, 16)


@settings(max_examples=200, deadline=None)
@given(U64, st.sets(st.integers(0, 63), max_size=3))
def test_within_distance_3_a_whole_block_is_shared(fp, flipped):
    other = fp
    for bit in flipped:
        other ^= 1 << bit
    assert any(a == b for a, b in zip(simhash_blocks(fp), simhash_blocks(other)))


@settings(max_examples=100, deadline=None)
@given(U64, st.tuples(*(st.integers(0, BLOCK_BITS - 1) for _ in range(BLOCKS))))
def test_distance_4_can_share_no_block(fp, offsets):
    # the guarantee is tight: one flipped bit in every block shares nothing
    other = fp
    for block, offset in enumerate(offsets):
        other ^= 1 << (BLOCK_BITS * block + offset)
    assert all(a != b for a, b in zip(simhash_blocks(fp), simhash_blocks(other)))


def _text(seed: int, n: int = 400) -> list[str]:
    rng = random.Random(seed)
    return [f"w{rng.randrange(5000)}" for _ in range(n)]


def test_band_hashes_are_deterministic_and_64_bit():
    sig = minhash(" ".join(_text(1)))
    keys = band_hashes(sig)
    assert len(keys) == BANDS and BANDS * ROWS <= NUM_PERM
    assert keys == band_hashes(bytes(sig))
    assert all(0 <= k < 1 << 64 for k in keys)
    assert band_hashes(bytes(NUM_PERM))[0] == 0xC77B3ABB6F87ACD9  # pinned: keys live in stores


def test_equal_rows_in_different_bands_give_different_keys():
    keys = band_hashes(bytes(NUM_PERM))
    assert len(set(keys)) == BANDS


def test_near_duplicates_collide_and_unrelated_pages_do_not():
    words = _text(2)
    edited = list(words)
    edited[200] = "changed"
    a, b, c = (band_hashes(minhash(" ".join(w))) for w in (words, edited, _text(3)))
    assert any(x == y for x, y in zip(a, b))
    assert not any(x == y for x, y in zip(a, c))


def test_short_signature_is_rejected():
    with pytest.raises(ValueError):
        band_hashes(bytes(BANDS * ROWS - 1))


def test_s_curve():
    assert candidate_probability(0.8) >= 0.97
    assert candidate_probability(0.3) <= 0.01
    assert candidate_probability(0.0) == 0.0 and candidate_probability(1.0) == 1.0
    points = [candidate_probability(j / 20) for j in range(21)]
    assert points == sorted(points)
    assert 0.6 < lsh_threshold() < 0.7
    assert abs(candidate_probability(0.5, bands=16, rows=8) - 0.0616) < 1e-3
