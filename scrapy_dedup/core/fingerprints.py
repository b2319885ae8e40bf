"""Fingerprints of extracted text: exact content hash, 64-bit SimHash, MinHash signature.

Pure and vectorised (numpy + xxhash, no I/O). All three are computed from the same canonical
text and token list (:mod:`scrapy_dedup.core.text`); :func:`fingerprint` does it in one pass.
Every constant that changes a fingerprint is listed in :data:`FINGERPRINT_PARAMS`; a store
refuses to mix fingerprints made with different params, so bump ``version`` on any change.
Parameter choices are measured in benchmarks/quality.py (results in benchmarks/results/).
"""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass

import numpy as np
import xxhash

from .language import translated
from .text import (
    _INVISIBLE_CHARS,
    _INVISIBLE_RE,
    _NON_WORD_TO_SPACE,
    _WORD_RE,
    TOKENIZER_VERSION,
    _canonical_token_bytes,
    _token_bytes,
    _word_bytes,
    canonical_text,
)

__all__ = [
    "DEFAULT_MAX_DISTANCE",
    "DEFAULT_MIN_JACCARD",
    "DEFAULT_MIN_TOKENS",
    "DISTANCE_JACCARD_SLACK",
    "FINGERPRINT_PARAMS",
    "MINHASH_SHINGLE",
    "NUM_PERM",
    "SIMHASH_BITS",
    "SIMHASH_SHINGLE",
    "SLOT_BITS",
    "Fingerprint",
    "content_hash",
    "fingerprint",
    "hamming",
    "jaccard_estimate",
    "minhash",
    "narrow_signature",
    "near_match",
    "raw_hash",
    "set_jaccard",
    "shingle_jaccard",
    "shingle_set",
    "simhash",
]

SIMHASH_BITS = 64
#: Tokens per SimHash feature. Measured: 1-3 token shingles let more 0.5<=J<0.8 pairs through;
#: log or binary weights instead of term frequency were a little more precise but need a sort.
SIMHASH_SHINGLE = 4
#: Tokens per MinHash shingle; word 5-shingle Jaccard is the similarity we define duplicates by.
MINHASH_SHINGLE = 5
#: MinHash signature length (slots per page). 256 rather than 128: the estimate's error at J=0.8
#: drops from 0.035 to 0.025, and that decides the pairs near the threshold (measured: 0.8<=J<0.9
#: found 0.87 -> 0.92 while 0.5<=J<0.8 flagged 0.12 -> 0.08).
NUM_PERM = 256
#: Bits kept of each slot's 32-bit minimum (b-bit minwise hashing): its low byte, so a signature
#: is NUM_PERM bytes, not 4 * NUM_PERM. Two unequal minima agree on their low byte one time in
#: 256, which :func:`jaccard_estimate` takes back out; the estimate's standard error at J = 0.8
#: goes from 0.0250 to 0.0251 (benchmarks/quality.py measures both widths on the same pages).
SLOT_BITS = 8

#: A candidate is a near duplicate when its MinHash estimate of 5-shingle Jaccard is at least
#: DEFAULT_MIN_JACCARD, or when its SimHash is within DEFAULT_MAX_DISTANCE bits (what the
#: block index guarantees to find) and the estimate is at least DEFAULT_MIN_JACCARD minus
#: DISTANCE_JACCARD_SLACK. The distance alone is not enough: with frequency weights one very
#: repeated shingle ("| | | |" in tables) can decide every bit, and unrelated pages then collide.
DEFAULT_MAX_DISTANCE = 3
DEFAULT_MIN_JACCARD = 0.8
DISTANCE_JACCARD_SLACK = 0.1
#: Two texts in different languages (:func:`~scrapy_dedup.core.language.translated`) are near
#: duplicates only from this Jaccard on: an untranslated copy, not a translation that shares its
#: commands and output with the original.
TRANSLATION_MIN_JACCARD = 0.9
#: Pages with fewer tokens are exact-match only. A substituted word changes 5 of the n-4
#: 5-shingles, so below ~50 tokens a single edit already takes Jaccard under 0.8.
DEFAULT_MIN_TOKENS = 50

# 2: SLOT_BITS = 8 (version 1 kept the whole 32-bit minima); 3: the MinHash over words (\w+
# runs), not tokens: a run of Han or kana is one word, as in the Jaccard it estimates; 4: one
# word per character of a script without spaces (a run of them is a clause: one edited character
# changed five clauses' shingles, and half the one-character edits of Japanese pages were missed)
_VERSION = 4
# Odd 64-bit constants for combining token hashes into shingle hashes (golden ratio, and the
# two multipliers of the murmur3 finaliser, which also serves as the mixing step).
_COMBINE = np.uint64(0x9E3779B97F4A7C15)
_FMIX1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S32 = np.uint64(32)
# Rows of shingles per MinHash block: a (rows x NUM_PERM) buffer of 512 KB, which stays in a
# core's cache (measured: 0.49 ms a 5,500-character page, against 0.70 with 2,048 rows).
_MINHASH_CHUNK = 256
_EMPTY_U64 = np.empty(0, dtype=np.uint64)


def _permutations(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    # Derived from xxhash rather than a numpy RNG, whose streams may change between numpy
    # releases: the permutations are part of the on-disk format.
    a = [xxhash.xxh3_64_intdigest(b"scrapy-dedup/minhash/a", seed=i) | 1 for i in range(num_perm)]
    b = [xxhash.xxh3_64_intdigest(b"scrapy-dedup/minhash/b", seed=i) for i in range(num_perm)]
    return np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64)


_PERM_A, _PERM_B = _permutations(NUM_PERM)
_SEEDS_ID = xxhash.xxh3_64_hexdigest(_PERM_A.tobytes() + _PERM_B.tobytes())

#: Everything that makes two fingerprints comparable. Stores record it and refuse to open
#: with different values.
FINGERPRINT_PARAMS: dict[str, object] = {
    "version": _VERSION,
    "tokenizer_version": TOKENIZER_VERSION,
    "tokens": "word-char runs | one char of a no-space script; punctuation dropped",
    "content_hash": "xxh3_128(utf8(canonical_text))",
    "token_hash": "xxh3_64(utf8(token))",
    "shingle_combine": "poly-0x9e3779b97f4a7c15+fmix64",
    "bits": SIMHASH_BITS,
    "simhash_shingle": SIMHASH_SHINGLE,
    "simhash_weight": "tf",
    "minhash_shingle": MINHASH_SHINGLE,
    "minhash_words": "\\w+ runs of the canonical text; one char of a no-space script",
    "num_perm": NUM_PERM,
    "minhash_perm": "((a*x+b) mod 2**64) >> 32",
    "minhash_slot_bits": SLOT_BITS,
    "seeds_id": _SEEDS_ID,
}


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """All fingerprints of one text, computed by :func:`fingerprint`."""

    content_hash: str  #: 32 hex digits, see :func:`content_hash`
    simhash: int  #: unsigned 64-bit, see :func:`simhash`
    minhash: bytes  #: NUM_PERM one-byte slots, see :func:`minhash`
    tokens: int  #: number of tokens of the canonical text
    length: int  #: len() of the canonical text


# -- exact hashes -------------------------------------------------------------------------


def content_hash(text: str) -> str:
    """128-bit xxh3 of the UTF-8 canonical text, as 32 hex digits.

    >>> content_hash("Hello,\\u00a0 WORLD\\r\\n") == content_hash("hello, world")
    True
    >>> content_hash("price: 10.00") == content_hash("price: 1000")
    False
    >>> len(content_hash(""))
    32
    """
    return xxhash.xxh3_128_hexdigest(canonical_text(text).encode("utf-8"))


def raw_hash(body: bytes) -> str:
    """128-bit xxh3 of raw bytes, as 32 hex digits (byte-identical bodies, PDFs, images).

    >>> raw_hash(b"")
    '99aa06d3014798d86001c324468d497f'
    """
    return xxhash.xxh3_128_hexdigest(body)


# -- vectorised feature hashing -----------------------------------------------------------


def _fmix64(x: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finaliser, in place: every input bit affects every output bit, so
    shingle hashes built by a cheap polynomial combination are still uniformly spread."""
    x ^= x >> _S33
    x *= _FMIX1
    x ^= x >> _S33
    x *= _FMIX2
    x ^= x >> _S33
    return x


def _token_hashes(tokens: list[bytes]) -> np.ndarray:
    # The only per-token work, done once and shared by SimHash and MinHash; map() keeps the
    # loop in C.
    hashes = map(xxhash.xxh3_64_intdigest, tokens)
    return np.fromiter(hashes, dtype=np.uint64, count=len(tokens))


def _shingle_hashes(token_hashes: np.ndarray, size: int, mix: bool = True) -> np.ndarray:
    """Hashes of every run of ``size`` consecutive tokens (order-sensitive); a text shorter
    than ``size`` tokens is one shingle, an empty text none. ``mix=False`` leaves out the
    finaliser: a bijection, so the values are as distinct as with it (what a caller that only
    compares them for equality needs), not as uniformly spread."""
    if len(token_hashes) == 0:
        return _EMPTY_U64
    with np.errstate(over="ignore"):  # wrap-around multiplication is intended
        runs = _runs(token_hashes, min(size, len(token_hashes)))
        return _fmix64(runs) if mix else runs


def _runs(hashes: np.ndarray, width: int) -> np.ndarray:
    """For every run of ``width`` hashes from ``i``: the sum of ``hashes[i + j] * _COMBINE **
    (width - 1 - j)`` (mod 2**64), in a new array. Built from the runs of half the width (two
    of them, and one hash more when the width is odd), so a 5-shingle takes 6 array operations
    rather than 8."""
    if width == 1:
        return hashes.copy()
    half = width // 2
    shorter = _runs(hashes, half)
    runs = shorter[: len(shorter) - half] * _combine_power(half)
    runs += shorter[half:]
    if width % 2:
        runs = runs[:-1]
        runs *= _COMBINE
        runs += hashes[width - 1 :]
    return runs


@functools.cache
def _combine_power(k: int) -> np.uint64:
    return np.uint64(pow(int(_COMBINE), k, 1 << 64))


def _simhash_features(features: np.ndarray) -> int:
    n = len(features)
    if n == 0:
        return 0
    # bits[i, j] = bit j of feature i (little-endian bytes + little bit order = bit j of the int)
    bits = np.unpackbits(features.astype("<u8", copy=False).view(np.uint8), bitorder="little").reshape(n, 64)
    # Summing over every occurrence (not over distinct features) is the term-frequency weight,
    # without the sort np.unique would need. einsum, not a BLAS matrix product: OpenBLAS
    # threads made that 3x slower and noisy when several workers share the cores.
    ones = np.einsum("ij->j", bits, dtype=np.uint64)
    # Bit j is set when more occurrences vote 1 than 0 (ties vote 0): ones > n / 2.
    return int.from_bytes(np.packbits(ones > (n >> 1), bitorder="little").tobytes(), "little")


def _minhash_signature(shingles: np.ndarray, perm_a: np.ndarray, perm_b: np.ndarray) -> np.ndarray:
    # The high half of a multiply-add is the well-mixed part. Taking it is monotone, so the
    # high half of the smallest value is the smallest high half: shifted once per slot, after
    # the minimum, not once per shingle. Blocks are computed in one buffer kept in cache.
    sig = np.full(len(perm_a), np.iinfo(np.uint64).max, dtype=np.uint64)
    buffer = np.empty((min(_MINHASH_CHUNK, len(shingles)), len(perm_a)), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, len(shingles), _MINHASH_CHUNK):
            rows = shingles[start : start + _MINHASH_CHUNK]
            block = buffer[: len(rows)]
            np.multiply(rows[:, None], perm_a, out=block)
            block += perm_b
            np.minimum(sig, block.min(axis=0), out=sig)
    sig >>= _S32
    return sig.astype("<u4")


def _stored(minima: np.ndarray) -> bytes:
    # the low SLOT_BITS of each 32-bit minimum: what a Fingerprint carries and a store keeps
    return (minima & 0xFF).astype(np.uint8).tobytes()


def narrow_signature(signature: bytes) -> bytes:
    """A signature of 32-bit slots (fingerprint version 1, ``4 * NUM_PERM`` bytes) in this
    version's form: the low byte of each slot, exactly what :func:`minhash` now gives for the
    same text. A signature already narrow is returned as it is.

    >>> narrow_signature(bytes.fromhex("01020304" "ff000000"))
    b'\\x01\\xff'
    >>> narrow_signature(b"\\x07" * NUM_PERM) == b"\\x07" * NUM_PERM
    True
    """
    if len(signature) == NUM_PERM or not signature:
        return signature
    if len(signature) % 4:
        raise ValueError(f"a MinHash signature of {len(signature)} bytes is not one of 32-bit slots")
    return _stored(np.frombuffer(signature, dtype="<u4"))


# -- public fingerprints -------------------------------------------------------------------


def simhash(text: str) -> int:
    """64-bit SimHash of the text's token ``SIMHASH_SHINGLE``-shingles, weighted by frequency.

    Near-identical texts get fingerprints a few bits apart; unrelated ones about 32 apart.
    Empty text gives 0.

    >>> simhash("")
    0
    >>> a = simhash("the quick brown fox jumps over the lazy dog " * 20 + "and runs away")
    >>> b = simhash("the quick brown fox jumps over the lazy dog " * 20 + "and walks away")
    >>> hamming(a, b) <= 3
    True
    """
    return _simhash_features(_shingle_hashes(_token_hashes(_token_bytes(text)), SIMHASH_SHINGLE))


def hamming(a: int, b: int) -> int:
    """Number of differing bits of two fingerprints.

    >>> hamming(0b1011, 0b0001)
    2
    """
    return (a ^ b).bit_count()


def minhash(text: str) -> bytes:
    """MinHash signature of the set of word ``MINHASH_SHINGLE``-shingles: ``NUM_PERM`` slots of
    one byte, the low ``SLOT_BITS`` of each permutation's minimum (the form the store keeps).
    Words are ``\\w+`` runs of the canonical text, as in :func:`shingle_jaccard`, but each
    character of a script without spaces (Han, kana, Thai, ...) is one word, as it is one token.

    >>> sig = minhash("VACUUM reclaims storage occupied by dead tuples")
    >>> len(sig) == NUM_PERM
    True
    >>> jaccard_estimate(sig, minhash("vacuum  RECLAIMS storage occupied by dead tuples"))
    1.0
    """
    shingles = _shingle_hashes(_token_hashes(_word_bytes(text)), MINHASH_SHINGLE)
    return _stored(_minhash_signature(shingles, _PERM_A, _PERM_B))


def jaccard_estimate(a: bytes, b: bytes) -> float:
    """Estimate of the Jaccard similarity of two shingle sets from the share of equal slots.

    A slot is equal when the minima are (probability J), or by chance when their low bytes
    are (1/256 of the rest), so the share m estimates J + (1 - J) / 256 and the estimate is
    (m - 1/256) / (1 - 1/256), at least 0. Its standard error is 0.0251 at J = 0.8 with 256
    slots. With k of 256 slots equal it is (k - 1) / 255, so 205 equal slots reach 0.8 exactly,
    as with whole minima. A missing signature (empty bytes) estimates 0.0; non-empty
    signatures of different sizes raise ValueError.

    >>> jaccard_estimate(bytes(4), bytes(2) + b"\\x01\\x01")
    0.4980392156862745
    >>> jaccard_estimate(bytes(NUM_PERM), bytes(NUM_PERM))
    1.0
    >>> jaccard_estimate(b"", minhash("anything"))
    0.0
    """
    if not a or not b:
        return 0.0
    if len(a) != len(b):
        raise ValueError(f"MinHash signatures of different sizes: {len(a)} and {len(b)}")
    slots = len(a)
    equal = np.count_nonzero(np.frombuffer(a, dtype=np.uint8) == np.frombuffer(b, dtype=np.uint8))
    # (equal / slots - 1/256) / (1 - 1/256) in integers, then one rounding
    return max(0.0, (256 * int(equal) - slots) / (255 * slots))


def fingerprint(text: str) -> Fingerprint:
    """Every fingerprint of ``text`` in one pass (canonicalised and tokenized once).

    >>> fp = fingerprint("Hello  World")
    >>> fp.content_hash == content_hash("hello world"), fp.simhash == simhash("hello world")
    (True, True)
    >>> fp.tokens, fp.length
    (2, 11)
    """
    canonical, tokens, length, words = _canonical_token_bytes(text)
    token_hashes = _token_hashes(tokens)
    word_hashes = token_hashes if words is tokens else _token_hashes(words)
    return Fingerprint(
        content_hash=xxhash.xxh3_128_hexdigest(canonical),
        simhash=_simhash_features(_shingle_hashes(token_hashes, SIMHASH_SHINGLE)),
        minhash=_stored(_minhash_signature(_shingle_hashes(word_hashes, MINHASH_SHINGLE), _PERM_A, _PERM_B)),
        tokens=len(token_hashes),
        length=length,
    )


#: A word of the Jaccard that defines a near duplicate.
_WORD = _WORD_RE


def shingle_set(text: str) -> np.ndarray:
    """The word ``MINHASH_SHINGLE``-shingle hashes of ``text`` (words: ``\\w+`` runs, one word a
    character of a script without spaces, after the invisible characters are dropped, as the
    fingerprints drop them, then NFKC and casefold),
    distinct and sorted: what :func:`set_jaccard` compares (kept by a caller that compares one
    text many times). They are only compared for equality, so they skip the finaliser that
    spreads the MinHash's shingle hashes: equal and distinct exactly where those are."""
    if not text.isascii() and any(ch in text for ch in _INVISIBLE_CHARS):
        # a soft hyphen or a zero-width space inside a word is no word break
        text = _INVISIBLE_RE.sub("", text)
    folded = unicodedata.normalize("NFKC", text).casefold()
    # ASCII punctuation and spaces to spaces, then one split in C: the ASCII parts are words;
    # a part with other characters (letters or punctuation beyond ASCII) needs the regex
    words = folded.encode("utf-8", "surrogatepass").translate(_NON_WORD_TO_SPACE).split()
    if not folded.isascii():
        words = [w for part in words for w in ([part] if part.isascii() else _words_of_part(part))]
    hashes = np.sort(_shingle_hashes(_token_hashes(words), MINHASH_SHINGLE, mix=False))
    # what np.unique gives, without its hash table (several times slower on a few hundred)
    return hashes[np.concatenate(([True], hashes[1:] != hashes[:-1]))] if len(hashes) else hashes


def _words_of_part(part: bytes) -> list[bytes]:
    return [word.encode("utf-8") for word in _WORD.findall(part.decode("utf-8", "surrogatepass"))]


def set_jaccard(sa: np.ndarray, sb: np.ndarray) -> float:
    """Exact Jaccard similarity of two :func:`shingle_set` results; two empty sets give 1.0."""
    if not len(sa) and not len(sb):
        return 1.0
    # both sorted and distinct: where each of sa would go in sb finds it when it is there
    inter = int(np.count_nonzero(sb.take(np.searchsorted(sb, sa), mode="clip") == sa)) if len(sb) else 0
    return inter / (len(sa) + len(sb) - inter)


def shingle_jaccard(a: str, b: str) -> float:
    """Exact Jaccard similarity of the word ``MINHASH_SHINGLE``-shingle sets of two texts, words
    being ``\\w+`` runs (one word a character of a script without spaces) after invisible
    characters are dropped, NFKC and casefold: the similarity a near duplicate is defined by
    (what :func:`jaccard_estimate` estimates). A text
    of fewer words is one shingle; two empty texts give 1.0.

    >>> shingle_jaccard("a b c d e f", "a b c d e g")
    0.3333333333333333
    >>> shingle_jaccard("std::iter::Chain<A, B>", "STD :: iter :: chain < a , b >")
    1.0
    """
    return set_jaccard(shingle_set(a), shingle_set(b))


def near_match(
    a: Fingerprint,
    b: Fingerprint,
    *,
    max_distance: int = DEFAULT_MAX_DISTANCE,
    min_jaccard: float = DEFAULT_MIN_JACCARD,
    min_tokens: int = DEFAULT_MIN_TOKENS,
    texts: tuple[str, str] | None = None,
    exact: float | None = None,
) -> tuple[bool, int, float]:
    """Confirm a candidate pair: ``(is near duplicate, SimHash distance, Jaccard)``.

    A pair matches when the MinHash estimate is at least ``min_jaccard``, or when the SimHash
    distance is at most ``max_distance`` and the estimate is at least ``min_jaccard -
    DISTANCE_JACCARD_SLACK`` (two independent signals agreeing on a borderline pair). Pages
    shorter than ``min_tokens`` never match: they are exact-only.

    With ``texts`` (the two texts the fingerprints were made from), the pair is decided by its
    exact word 5-shingle Jaccard instead of the estimate (:func:`shingle_jaccard`, then the
    third value returned), so that estimation error cannot merge or split it; and two texts in
    different languages (a translation) need ``TRANSLATION_MIN_JACCARD`` at least. ``exact``:
    that Jaccard, when the caller has it already (:func:`set_jaccard` of shingle sets it keeps).

    >>> base = " ".join(f"w{i}" for i in range(300))
    >>> near_match(fingerprint(base), fingerprint(base.replace("w150", "changed")))
    (True, 4, 0.984313725490196)
    >>> near_match(fingerprint(base), fingerprint(" ".join(f"v{i}" for i in range(300))))[0]
    False
    """
    distance = hamming(a.simhash, b.simhash)
    if texts is not None and a.tokens >= min_tokens and b.tokens >= min_tokens:
        # decided on the texts: the estimate is not needed (a settle decides most pairs here)
        exact = shingle_jaccard(*texts) if exact is None else exact
        if exact >= TRANSLATION_MIN_JACCARD or exact < min_jaccard:
            return exact >= min_jaccard, distance, exact
        return not translated(*texts), distance, exact
    estimate = jaccard_estimate(a.minhash, b.minhash)
    if a.tokens < min_tokens or b.tokens < min_tokens:
        return False, distance, estimate
    floor = round(min_jaccard - DISTANCE_JACCARD_SLACK, 9)  # 0.8 - 0.1 is 0.7000000000000001
    close = distance <= max_distance and estimate >= floor
    return (estimate >= min_jaccard or close), distance, estimate
