"""Index keys for near-duplicate candidates: SimHash blocks and MinHash LSH bands.

Pure key math; the store lays the bytes out. Two independent indexes, because each misses
what the other finds: the SimHash block tables find every stored fingerprint within Hamming
distance 3 (and nothing beyond that is guaranteed), the MinHash bands find pairs by estimated
Jaccard similarity whatever their SimHash distance. Parameters measured in
benchmarks/quality.py.
"""

from __future__ import annotations

import xxhash

from .fingerprints import NUM_PERM, SIMHASH_BITS, SLOT_BITS

__all__ = [
    "BANDS",
    "BLOCKS",
    "BLOCK_BITS",
    "ROWS",
    "band_hashes",
    "candidate_probability",
    "lsh_threshold",
    "simhash_blocks",
]

#: SimHash tables: the 64-bit fingerprint cut into BLOCKS blocks of BLOCK_BITS bits.
BLOCKS = 4
BLOCK_BITS = 16
#: MinHash LSH: BANDS bands of ROWS signature slots each (BANDS * ROWS <= NUM_PERM).
#: 32 x 8: a pair with J = 0.8 becomes a candidate with probability 0.997, J = 0.5 with 0.12,
#: J = 0.3 (pages sharing boilerplate) with 0.002; the S-curve is steepest near J = 0.65.
BANDS = 32
ROWS = 8

_BLOCK_MASK = (1 << BLOCK_BITS) - 1
_SLOT_BYTES = SLOT_BITS // 8  # bytes per MinHash slot
_BAND_BYTES = ROWS * _SLOT_BYTES

assert BLOCKS * BLOCK_BITS == SIMHASH_BITS
assert BANDS * ROWS <= NUM_PERM


def simhash_blocks(fp: int) -> tuple[int, ...]:
    """The BLOCKS blocks of a 64-bit SimHash: block i holds bits 16*i .. 16*i+15.

    Pigeonhole: flipping at most 3 bits touches at most 3 of the 4 blocks, so a fingerprint
    within Hamming distance 3 of a stored one shares at least one whole block with it, and
    looking up the four (table, block) keys finds it.

    >>> simhash_blocks(0x0123_4567_89AB_CDEF) == (0xCDEF, 0x89AB, 0x4567, 0x0123)
    True
    >>> a = 0x0123_4567_89AB_CDEF
    >>> b = a ^ (1 << 3) ^ (1 << 20) ^ (1 << 40)        # distance 3, three blocks touched
    >>> [x == y for x, y in zip(simhash_blocks(a), simhash_blocks(b))]
    [False, False, False, True]
    """
    return tuple((fp >> (BLOCK_BITS * i)) & _BLOCK_MASK for i in range(BLOCKS))


def band_hashes(minhash: bytes) -> tuple[int, ...]:
    """One unsigned 64-bit key per LSH band: xxh3_64 of the band's ROWS slots, seeded with the
    band number so equal slot values in two different bands give different keys.

    Two pages become candidates when any band key is equal; a pair with Jaccard
    similarity j does with probability :func:`candidate_probability` (j).

    >>> from scrapy_dedup.core.fingerprints import minhash
    >>> keys = band_hashes(minhash("VACUUM reclaims storage occupied by dead tuples."))
    >>> len(keys) == BANDS and all(0 <= k < 2**64 for k in keys)
    True
    >>> keys == band_hashes(minhash("vacuum  reclaims storage occupied by dead tuples."))
    True
    """
    if len(minhash) < BANDS * _BAND_BYTES:
        raise ValueError(f"MinHash signature of {len(minhash)} bytes, need {BANDS * _BAND_BYTES}")
    view = memoryview(minhash)
    return tuple(
        xxhash.xxh3_64_intdigest(view[band * _BAND_BYTES : (band + 1) * _BAND_BYTES], seed=band)
        for band in range(BANDS)
    )


def candidate_probability(j: float, bands: int = BANDS, rows: int = ROWS) -> float:
    """Probability that a pair with Jaccard similarity ``j`` collides in at least one band:
    ``1 - (1 - j**rows) ** bands`` (the LSH S-curve).

    >>> round(candidate_probability(0.8), 3), round(candidate_probability(0.5), 3)
    (0.997, 0.118)
    >>> round(candidate_probability(0.8, bands=16, rows=8), 3)
    0.947
    """
    return 1.0 - (1.0 - j**rows) ** bands


def lsh_threshold(bands: int = BANDS, rows: int = ROWS) -> float:
    """Jaccard similarity where the S-curve is steepest, about ``(1/bands) ** (1/rows)``.

    >>> round(lsh_threshold(16, 8), 3)
    0.707
    """
    return (1.0 / bands) ** (1.0 / rows)
