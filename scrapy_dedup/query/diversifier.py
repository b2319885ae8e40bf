"""Query-time deduplication of retrieved hits: ``diversify(hits, k)``.

The last layer of the funnel. Two retrieved chunks with different ids can still say the same
thing; the retrieved set is small, so checking it is cheap. In this order:

1. exact copies (the same :func:`~scrapy_dedup.core.fingerprints.content_hash`, or the same chunk
   id) collapse into the best-scored hit, which lists the others' sources in ``also_in``;
2. near copies collapse the same way, confirmed by the crawl's own rule,
   :func:`~scrapy_dedup.core.fingerprints.near_match`; hits that carry a crawl's ``dedup``
   cluster id are grouped by it instead of being compared again;
3. chunks of one document whose spans overlap are merged into one passage;
4. an optional cap of hits per source;
5. MMR over the embeddings the hits carry, when they carry any (nothing is embedded here);
   near-identical embeddings are flagged (``semantic_duplicate_of``), or dropped if asked.

Pure: numpy, xxhash and the core; no Scrapy, no framework import (hits are duck typed, see
:mod:`scrapy_dedup.query.hits`). Deterministic: ties are broken by the canonical text's hash, never by
input order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xxhash

from scrapy_dedup.core.fingerprints import DEFAULT_MIN_TOKENS, Fingerprint, fingerprint, near_match
from scrapy_dedup.core.text import _canonical_batch, canonical_text, tokenize
from scrapy_dedup.query.hits import HitKind, kind_of, resolve

__all__ = ["ALSO_IN", "REASONS", "SEMANTIC_DUPLICATE_OF", "SEMANTIC_SIMILARITY",
           "Diversified", "Explanation", "diversify"]

#: Fields added to returned hits (top-level keys of a dict, keys of a Document's metadata).
ALSO_IN = "also_in"
SEMANTIC_DUPLICATE_OF = "semantic_duplicate_of"
SEMANTIC_SIMILARITY = "semantic_similarity"
_FIELDS = (ALSO_IN, SEMANTIC_DUPLICATE_OF, SEMANTIC_SIMILARITY)

#: Why a hit is not returned as it was given, in the order the steps run.
REASONS = {
    "same_chunk": "the same chunk id as",
    "exact_duplicate": "the same canonical text as",
    "same_cluster": "in the same dedup cluster as",
    "near_duplicate": "a near copy of",
    "overlapping_span": "merged with an overlapping span of the same document,",
    "source_cap": "over max_per_source for its source",
    "semantic_duplicate": "a semantic duplicate of",
    "not_selected": "not among the k selected",
}
# Reasons whose hit is the same content as the one it matched: its source joins also_in.
_SAME_CONTENT = {"same_chunk", "exact_duplicate", "same_cluster", "near_duplicate", "overlapping_span",
                 "semantic_duplicate"}


@dataclass(frozen=True)
class Explanation:
    """Why one input hit is not in the result as it was given (``explain=True``).

    ``index`` is the hit's position in the input, ``matched`` the input position of the hit it
    matched (None for ``source_cap`` and ``not_selected``), ``kept_at`` the position in the
    result of the hit that now stands for it (None when it was simply left out), ``source`` its
    source, ``detail`` the figures behind the decision (``jaccard`` and ``distance`` of a near
    copy, ``cosine`` of a semantic duplicate, ``mmr`` of a hit not selected). A hit that is
    returned but flagged as a semantic duplicate has ``reason == "semantic_duplicate"`` and a
    ``kept_at`` that is its own position.
    """

    index: int
    reason: str
    matched: int | None
    kept_at: int | None
    source: Any
    detail: dict[str, Any] = field(default_factory=dict)
    hit: Any = field(default=None, repr=False, compare=False)

    def __str__(self) -> str:
        who = f"hit {self.index}" + (f" ({self.source})" if self.source is not None else "")
        what = REASONS[self.reason]
        if self.matched is not None:
            what += f" hit {self.matched}"
        figures = ", ".join(f"{k} {v}" for k, v in self.detail.items() if k not in ("source",))
        where = "" if self.kept_at is None else f"; kept as result {self.kept_at}"
        return f"{who}: {what}{f' ({figures})' if figures else ''}{where}"


class Diversified(list):
    """The hits kept, best first; ``explanation`` lists every hit dropped, merged or flagged
    (filled when ``explain=True``)."""

    explanation: list[Explanation]

    def __init__(self, hits: Iterable[Any] = (), explanation: list[Explanation] | None = None) -> None:
        super().__init__(hits)
        self.explanation = explanation or []


class _Hit:
    """One input hit while it is being decided."""

    __slots__ = ("index", "obj", "kind", "text", "canonical", "key", "score", "rank", "source", "label",
                 "ident", "document", "span", "cluster", "embedding", "also_in", "parent", "reason",
                 "detail", "merged", "absorbed")

    # read from the hit by _read, ranked by _rank
    text: str
    canonical: bytes  # UTF-8
    key: str  # the canonical text's hash
    score: float | None  # None: the hit has no score
    rank: int
    source: Any
    label: Any  # the source, else the hit's id
    ident: Any
    document: Any
    span: tuple[int, int] | None
    cluster: Any
    embedding: Sequence[float] | None
    also_in: list[Any]

    def __init__(self, index: int, obj: Any, kind: HitKind) -> None:
        self.index, self.obj, self.kind = index, obj, kind
        self.parent: _Hit | None = None  # the hit that stands for this one after a collapse
        self.reason: str | None = None
        self.detail: dict[str, Any] = {}
        self.merged = False  # text and span replaced by a merge of overlapping chunks
        self.absorbed: list[_Hit] = []


# -- candidates for the near-duplicate test --------------------------------------------------
#
# near_match needs full fingerprints (a 256-slot MinHash, ~0.3 ms for 300 words), too slow to
# compute for every hit of a 1 ms budget. Candidates are found first by content-defined sampling:
# the 32 bytes of canonical text from the start of a token are hashed, and one window in 8 (by
# its hash) is a feature, so two texts sample the same windows wherever they share text. A pair
# with a 5-shingle Jaccard of 0.6 (below what near_match accepts) shares ~28 of its ~37 features
# per 300 tokens and misses every one with probability about e^-28. Only hits that share enough
# features with a better hit are fingerprinted and compared.
_WINDOW = 32
_SAMPLE_SHIFT = np.uint64(61)  # keep windows whose hash has its top 3 bits zero: 1 in 8
_WORD_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F),
             np.uint64(0x165667B19E3779F9), np.uint64(0x27D4EB2F165667C5))
#: A pair is a candidate when the Jaccard similarity of its sampled features is at least this.
#: A pair near_match can accept (J >= ~0.65) has ~45 features in the union per 300 tokens, so
#: its estimate is 0.65 +- 0.07: 0.4 is 3.5 standard errors below. Pairs that only share
#: passages (J ~ 0.3, common in documentation) stay below it and are never fingerprinted.
_MIN_SAMPLED_JACCARD = 0.4
#: Below this many features in the union (short texts) the estimate is too coarse: a pair is
#: a candidate when it shares half of the smaller set instead.
_MIN_UNION = 24


def _is_candidate(shared: int, a: int, b: int) -> bool:
    """Whether two texts with ``a`` and ``b`` sampled features, ``shared`` of them in common,
    are compared with near_match."""
    if shared < 2:
        return False
    union = a + b - shared
    if union >= _MIN_UNION:
        return shared >= _MIN_SAMPLED_JACCARD * union
    return 2 * shared >= min(a, b)


def _sampled_keys(texts: list[bytes]) -> tuple[np.ndarray, np.ndarray] | None:
    """The sampled features of the texts as sorted, distinct keys (48 bits of window hash,
    then 16 bits of the text's position), and the number of features of each text; None
    when there is nothing to sample."""
    n = len(texts)
    if n > 0xFFFF:
        return None
    groups, lo, size = [], 0, 0
    first, last = True, True  # whether a group's first byte starts a token; after a space?
    for hi, text in enumerate(texts, 1):  # in groups of ~128 KB: the passes stay in the CPU's cache
        size += len(text)
        if text:
            last = text[-1] == 0x20
        if size >= _GROUP_BYTES or hi == n:
            groups.append(_group_keys(texts[lo:hi], lo, first))
            lo, size, first = hi, 0, last
    keys = np.sort(np.concatenate(groups)) if len(groups) > 1 else np.sort(groups[0])
    if len(keys) == 0:
        return None
    keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    return keys, np.bincount((keys & np.uint64(0xFFFF)).astype(np.intp), minlength=n)


_GROUP_BYTES = 1 << 17
_NO_KEYS = np.empty(0, dtype=np.uint64)


def _group_keys(texts: list[bytes], offset: int, first: bool) -> np.ndarray:
    """The keys of the sampled windows of some consecutive texts, the first at ``offset``;
    ``first``: whether their first byte starts a token (a text's start counts as one only at
    the very start, or after a space)."""
    buf = b"".join(texts)
    size = len(buf)
    if size < _WINDOW:
        return _NO_KEYS
    # Padded so that a window may start at any byte: the ones that run into the next text (or
    # the padding) are dropped after sampling, which leaves 1 in 8 to check.
    data = np.frombuffer(buf + bytes(_WINDOW), dtype=np.uint8)
    # Token starts: after a space, and every character of a script written without spaces
    # (all of them have 3- or 4-byte UTF-8 encodings), as core.text tokenizes. The texts are
    # sampled as if joined: a text's first byte follows the last byte of the one before.
    if buf.isascii():
        pos = np.flatnonzero(data[: size - 1] == 0x20)
        pos += 1
        if first:
            pos = np.concatenate((np.zeros(1, dtype=pos.dtype), pos))
    else:
        start = data[:size] >= 0xE0
        start[1:] |= data[: size - 1] == 0x20
        start[0] |= first
        pos = np.flatnonzero(start)
    # The window's 32 bytes as 4 little-endian words: one row gather from a strided view.
    words = np.lib.stride_tricks.as_strided(data, shape=(size, _WINDOW), strides=(1, 1))[pos].view("<u8")
    with np.errstate(over="ignore"):
        a, b, c, d = _WORD_MIX
        hashes = words[:, 0] * a
        hashes += words[:, 1] * b
        hashes += words[:, 2] * c
        hashes += words[:, 3] * d
        hashes ^= hashes >> np.uint64(31)
        hashes *= a
    keep = (hashes >> _SAMPLE_SHIFT) == 0
    pos, hashes = pos[keep], hashes[keep]
    ends = np.cumsum([len(t) for t in texts])
    owner = np.searchsorted(ends, pos, side="right")
    fits = pos + _WINDOW <= ends[owner]  # windows that do not run into the next text
    return (hashes[fits] << np.uint64(16)) | (owner[fits] + offset).astype(np.uint64)


def _features(texts: list[bytes]) -> tuple[list[np.ndarray], np.ndarray]:
    """For each text, the sampled window hashes that another text has too, and the number of
    distinct sampled hashes it has in all."""
    n = len(texts)
    none = [np.empty(0, dtype=np.uint64)] * n
    sampled = _sampled_keys(texts)
    if sampled is None:
        return none, np.zeros(n, dtype=np.intp)
    keys, counts = sampled
    owner = (keys & np.uint64(0xFFFF)).astype(np.intp)
    hashes = keys >> np.uint64(16)
    same = hashes[1:] == hashes[:-1]
    shared = np.zeros(len(hashes), dtype=bool)
    shared[1:] |= same
    shared[:-1] |= same
    if not shared.any():
        return none, counts
    hashes, owner = hashes[shared], owner[shared]
    order = np.argsort(owner, kind="stable")
    hashes, owner = hashes[order], owner[order]
    cuts = np.searchsorted(owner, np.arange(n + 1))
    return [hashes[cuts[i] : cuts[i + 1]] for i in range(n)], counts


#: Pairs of texts sharing a feature, counted with repeats, above which the candidates are found
#: by walking posting lists instead (many copies of one text share every feature).
_MAX_PAIRS = 1 << 20


def _candidate_pairs(texts: list[bytes]) -> tuple[list[int], list[int]] | None:
    """Every pair ``(i, j)``, ``i < j``, that :func:`_is_candidate` accepts, ordered by ``j``
    then ``i``, counted for all pairs at once; None when there would be too many pairs."""
    n = len(texts)
    sampled = _sampled_keys(texts)
    if sampled is None:
        return [], []
    keys, counts = sampled
    hashes = keys >> np.uint64(16)
    owner = (keys & np.uint64(0xFFFF)).astype(np.intp)
    # Runs of equal hashes (their owners ascending): every element pairs with the later ones.
    first = np.flatnonzero(np.concatenate(([True], hashes[1:] != hashes[:-1])))
    length = np.diff(np.append(first, len(keys)))
    later = np.repeat(first + length, length) - np.arange(len(keys)) - 1
    total = int(later.sum())
    if total == 0:
        return [], []
    if total > _MAX_PAIRS:
        return None
    lo = np.repeat(np.arange(len(keys)), later)
    hi = lo + 1 + np.arange(total) - np.repeat(np.cumsum(later) - later, later)
    code, shared = np.unique(owner[hi] * n + owner[lo], return_counts=True)
    j, i = np.divmod(code, n)
    a, b = counts[i], counts[j]
    union = a + b - shared
    accept = (shared >= 2) & np.where(union >= _MIN_UNION, shared >= _MIN_SAMPLED_JACCARD * union,
                                      2 * shared >= np.minimum(a, b))
    return i[accept].tolist(), j[accept].tolist()


# -- the steps -------------------------------------------------------------------------------


def _collapse(hit: _Hit, into: _Hit, reason: str, **detail: Any) -> None:
    hit.parent, hit.reason, hit.detail = into, reason, detail
    into.absorbed.append(hit)


def _exact(hits: list[_Hit]) -> list[_Hit]:
    by_key: dict[str, _Hit] = {}
    by_ident: dict[Any, _Hit] = {}
    kept = []
    for hit in hits:
        if hit.ident is not None and hit.ident in by_ident:
            _collapse(hit, by_ident[hit.ident], "same_chunk")
        elif hit.key in by_key:
            _collapse(hit, by_key[hit.key], "exact_duplicate")
        else:
            by_key[hit.key] = hit
            if hit.ident is not None:
                by_ident[hit.ident] = hit
            kept.append(hit)
    return kept


def _clusters(hits: list[_Hit]) -> list[_Hit]:
    by_cluster: dict[Any, _Hit] = {}
    kept = []
    for hit in hits:
        if hit.cluster is not None and hit.cluster in by_cluster:
            _collapse(hit, by_cluster[hit.cluster], "same_cluster", cluster_id=hit.cluster)
        else:
            if hit.cluster is not None:
                by_cluster[hit.cluster] = hit
            kept.append(hit)
    return kept


def _eligible(hit: _Hit) -> bool:
    # near_match never matches texts under DEFAULT_MIN_TOKENS tokens. Canonical text has one
    # space between words and a word is at least one token, so long texts need no tokenizing;
    # short ones are counted with the core's tokenizer, whatever it does with punctuation.
    # Counting spaces costs ~1.5 ns a byte: a prefix usually holds enough of them already.
    canonical = hit.canonical
    return (canonical.count(b" ", 0, 12 * DEFAULT_MIN_TOKENS) + 1 >= DEFAULT_MIN_TOKENS
            or canonical.count(b" ") + 1 >= DEFAULT_MIN_TOKENS
            or len(tokenize(canonical.decode("utf-8"))) >= DEFAULT_MIN_TOKENS)


def _near(hits: list[_Hit], fingerprints: dict[str, Fingerprint]) -> list[_Hit]:
    pool = [h for h in hits if _eligible(h)]
    if len(pool) < 2:
        return hits
    texts = [h.canonical for h in pool]

    def fp(h: _Hit) -> Fingerprint:
        found = fingerprints.get(h.key)
        if found is None:
            found = fingerprints[h.key] = fingerprint(h.canonical.decode("utf-8"))
        return found

    # In rank order, each hit is compared with the better hits still standing that share
    # enough features with it, best first, and joins the first it matches (as in the crawl's
    # clusters, only representatives are compared).
    pairs = _candidate_pairs(texts)
    if pairs is None:
        _near_posting(pool, texts, fp)
        return [h for h in hits if h.parent is None]
    joined = [False] * len(pool)
    for i, j in zip(*pairs):
        if joined[j] or joined[i]:
            continue
        rep, hit = pool[i], pool[j]
        if rep.cluster is not None and hit.cluster is not None:
            continue  # the crawl already decided these two are different documents
        matched, distance, jaccard = near_match(fp(rep), fp(hit))
        if matched:
            _collapse(hit, rep, "near_duplicate", jaccard=jaccard, distance=distance)
            joined[j] = True
    return [h for h in hits if h.parent is None]


def _near_posting(pool: list[_Hit], texts: list[bytes], fp: Callable[[_Hit], Fingerprint]) -> None:
    """The same decisions as _near, with posting lists of the representatives' features: for
    sets whose features pair up too often to count all pairs at once."""
    shared, counts = _features(texts)
    posting: dict[int, list[int]] = {}
    counts = counts.tolist()
    for j, hit in enumerate(pool):
        mine = shared[j].tolist()
        if not mine:
            continue
        together: dict[int, int] = {}
        for f in mine:
            for i in posting.get(f, ()):
                together[i] = together.get(i, 0) + 1
        mine_count = counts[j]
        for i in sorted(i for i, c in together.items() if _is_candidate(c, counts[i], mine_count)):
            rep = pool[i]
            if rep.cluster is not None and hit.cluster is not None:
                continue
            matched, distance, jaccard = near_match(fp(rep), fp(hit))
            if matched:
                _collapse(hit, rep, "near_duplicate", jaccard=jaccard, distance=distance)
                break
        else:
            for f in mine:
                posting.setdefault(f, []).append(j)


def _merge_spans(hits: list[_Hit]) -> tuple[list[_Hit], bool]:
    """Merge chunks of one document whose spans overlap and whose texts agree on the overlap."""
    by_doc: dict[Any, list[_Hit]] = {}
    for h in hits:
        if h.document is not None and h.span is not None:
            by_doc.setdefault(h.document, []).append(h)
    changed = False
    for group in by_doc.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda h: (_span(h)[0], h.rank))
        block = [group[0]]
        (start, end), text = _span(group[0]), group[0].text
        ends: list[_Hit | None] = [*group[1:], None]
        for hit in ends:
            if hit is not None and _span(hit)[0] < end and _agree(start, end, text, hit):
                block.append(hit)
                lo, hi = _span(hit)
                if hi > end:
                    text = text[: lo - start] + hit.text
                    end = hi
                continue
            if len(block) > 1:
                best = min(block, key=lambda h: h.rank)
                for other in block:
                    if other is not best:
                        _collapse(other, best, "overlapping_span", span=list(_span(other)))
                best.text, best.span, best.merged = text, (start, end), True
                best.canonical = canonical_text(text).encode("utf-8")
                best.key = xxhash.xxh3_128_hexdigest(best.canonical)
                changed = True
            if hit is not None:
                block, (start, end), text = [hit], _span(hit), hit.text
    return [h for h in hits if h.parent is None], changed


def _span(hit: _Hit) -> tuple[int, int]:
    """The span of a hit grouped by _merge_spans, which groups only hits that have one."""
    assert hit.span is not None
    return hit.span


def _agree(start: int, end: int, text: str, hit: _Hit) -> bool:
    """Whether ``hit``'s text is what the block (``text``, from ``start`` to ``end``) has where
    they overlap. Both texts must be as long as their spans: otherwise the offsets do not count
    characters of one text, and nothing is merged."""
    lo, hi = _span(hit)
    if end - start != len(text) or hi - lo != len(hit.text):
        return False
    if hi <= end:
        return text[lo - start : hi - start] == hit.text
    return hit.text.startswith(text[lo - start :])


def _cap(hits: list[_Hit], limit: int) -> list[_Hit]:
    seen: dict[Any, int] = {}
    kept = []
    for hit in hits:
        if hit.source is None:
            kept.append(hit)
            continue
        n = seen.get(hit.source, 0)
        if n >= limit:
            hit.reason, hit.detail = "source_cap", {"max_per_source": limit}
        else:
            seen[hit.source] = n + 1
            kept.append(hit)
    return kept


def _matrix(hits: list[_Hit]) -> np.ndarray | None:
    """Unit rows of the hits' embeddings (zeros for a hit without one), or None if none has one."""
    dim = None
    for hit in hits:
        if hit.embedding is not None:
            if dim is None:
                dim = len(hit.embedding)
            elif len(hit.embedding) != dim:
                raise ValueError(f"hit {hit.index} has a {len(hit.embedding)}-dimensional embedding, "
                                 f"others {dim}")
    if dim is None:
        return None
    out = np.zeros((len(hits), dim), dtype=np.float32)
    for row, hit in enumerate(hits):
        if hit.embedding is not None:
            out[row] = hit.embedding
    if not np.isfinite(out).all():
        bad = next(h.index for r, h in enumerate(hits) if not np.isfinite(out[r]).all())
        raise ValueError(f"hit {bad} has an embedding with NaN or infinite values")
    norms = np.linalg.norm(out, axis=1)
    norms[norms == 0] = 1.0
    return out / norms[:, None]


def _semantic(hits: list[_Hit], k: int | None, lambda_mult: float, threshold: float, drop: bool,
              scored: bool) -> tuple[list[_Hit], dict[int, tuple[int, float]]]:
    """Semantic drops, MMR selection of ``k`` and flags; returns the hits kept (in rank order)
    and {position kept: (position of the hit it duplicates, cosine)}."""
    unit = _matrix(hits)
    if unit is None:
        if k is not None:
            for hit in hits[k:]:
                hit.reason = "not_selected"
            hits = hits[:k]
        return hits, {}
    # Small products without BLAS: waking OpenBLAS's threads costs more than the product
    # (measured 0.1 to 50 ms for 50 x 768 on a busy 2-core machine, einsum 0.4 ms).
    sims = np.einsum("ij,kj->ik", unit, unit) if len(hits) <= 128 else unit @ unit.T
    alive = list(range(len(hits)))
    if drop:
        alive = []
        for j in range(len(hits)):
            if alive:
                row = sims[j, alive]
                best = int(np.argmax(row))
                if row[best] >= threshold:
                    _collapse(hits[j], hits[alive[best]], "semantic_duplicate",
                              cosine=round(float(row[best]), 4))
                    continue
            alive.append(j)
    if k is not None and k < len(alive):
        alive = _mmr(hits, alive, sims, k, lambda_mult, scored)
    kept = [hits[j] for j in alive]
    flags = {}
    if not drop:
        sub = sims[np.ix_(alive, alive)]
        for pos in range(1, len(alive)):
            best = int(np.argmax(sub[pos, :pos]))
            if sub[pos, best] >= threshold:
                flags[pos] = (best, round(float(sub[pos, best]), 4))
    return kept, flags


def _mmr(hits: list[_Hit], alive: list[int], sims: np.ndarray, k: int, lambda_mult: float,
         scored: bool) -> list[int]:
    """Maximal marginal relevance: pick ``k`` of ``alive`` one at a time, each maximising
    ``lambda_mult * relevance - (1 - lambda_mult) * (largest cosine to a hit already picked)``.
    Relevance is the score scaled to 0..1 over ``alive`` (or 1 - rank/n without scores). The
    picks are returned in rank order, so the best hit stays first."""
    n = len(alive)
    if scored:
        scores = np.array([hits[j].score for j in alive], dtype=np.float64)
        spread = scores.max() - scores.min()
        relevance = (scores - scores.min()) / spread if spread > 0 else np.ones(n)
    else:
        relevance = 1.0 - np.arange(n) / n
    sub = sims[np.ix_(alive, alive)]
    closest = np.zeros(n)
    picked = np.zeros(n, dtype=bool)
    gain = np.empty(n)
    for _ in range(k):
        np.subtract(lambda_mult * relevance, (1.0 - lambda_mult) * closest, out=gain)
        gain[picked] = -np.inf
        j = int(np.argmax(gain))  # ties: the first, i.e. the better-ranked
        picked[j] = True
        np.maximum(closest, sub[j], out=closest)
    for left in np.flatnonzero(~picked):
        hit = hits[alive[left]]
        hit.reason = "not_selected"
        hit.detail = {"mmr": round(float(lambda_mult * relevance[left] - (1 - lambda_mult) * closest[left]), 4)}
    return [alive[j] for j in np.flatnonzero(picked)]


# -- reading and writing hits ----------------------------------------------------------------


def _key(canonical: str) -> str:
    # content_hash's definition (xxh3-128 of the UTF-8 canonical text), applied to text that is
    # canonical already; tests pin that the two agree.
    return xxhash.xxh3_128_hexdigest(canonical.encode("utf-8"))


def _number(value: Any, what: str, index: int) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"hit {index}: {what} {value!r} is not a number") from None
    if math.isnan(number):
        raise ValueError(f"hit {index}: {what} is NaN")
    return number


def _cluster_of(kind: HitKind, obj: Any, key: str) -> Any:
    """A crawl's cluster id, when the hit is the whole document the crawl decided on (a chunk of
    a document shares its page's cluster, not its text)."""
    meta = kind.meta(obj)
    dedup = meta.get("dedup") if meta else None
    if isinstance(dedup, dict) and dedup.get("cluster_id") is not None and dedup.get("content_hash") == key:
        return dedup["cluster_id"]
    return None


def _read(hits: Sequence[Any], text, score, embedding, source, cluster) -> list[_Hit]:
    get_text = resolve(text, "text")
    get_score = resolve(score, "score")
    get_embedding = resolve(embedding, "embedding")
    get_source = resolve(source, "source")
    get_cluster = resolve(cluster, "ident") if cluster is not None else None
    out = []
    for index, obj in enumerate(hits):
        kind = kind_of(obj)
        hit = _Hit(index, obj, kind)
        try:
            value = kind.text(obj) if text is None else get_text(kind, obj)
        except KeyError as exc:
            raise ValueError(f"hit {index}: {exc.args[0]}") from None
        if not isinstance(value, str):
            raise TypeError(f"hit {index}: text must be a str, got {type(value).__name__}")
        hit.text = value
        # The kinds' own readers are called directly when no field was named (most calls).
        number = kind.score(obj) if score is None else get_score(kind, obj)
        hit.score = number if type(number) is float and number == number else _number(number, "score", index)
        vector = kind.embedding(obj) if embedding is None else get_embedding(kind, obj)
        hit.embedding = None if vector is None or len(vector) == 0 else vector
        own_source, hit.ident, hit.document, hit.span = kind.place(obj, len(value))
        hit.source = own_source if source is None else get_source(kind, obj)
        hit.label = hit.source if hit.source is not None else hit.ident
        if hit.document is None:
            hit.document = hit.source
        hit.cluster = get_cluster(kind, obj) if get_cluster else None
        meta = kind.meta(obj)
        earlier = meta.get(ALSO_IN) if meta else None
        hit.also_in = list(earlier) if isinstance(earlier, (list, tuple)) else []
        out.append(hit)
    # All texts canonicalized together (the batch is several times faster than one by one).
    for hit, canonical in zip(out, _canonical_batch([hit.text for hit in out])):
        hit.canonical = canonical  # UTF-8
        hit.key = xxhash.xxh3_128_hexdigest(canonical)
        if not get_cluster:
            hit.cluster = _cluster_of(hit.kind, hit.obj, hit.key)
    return out


def _rank(hits: list[_Hit], scored: bool) -> list[_Hit]:
    """Best first: by score, ties by canonical-text hash, label and span, and last by the hit's
    other fields; without any score, input order is the ranking. Sets ``rank``."""
    if not scored:
        ordered = sorted(hits, key=lambda h: h.index)
    else:
        keyed = sorted(((-_score(h), h.key, str(h.label), h.span or (-1, -1)), h.index, h) for h in hits)
        ordered = [h for _, _, h in keyed]
        # Hits equal on every key so far differ (if at all) in other fields: order those by
        # their content too, so that a permutation of the input cannot change which is kept.
        i = 0
        while i < len(keyed):
            j = i + 1
            while j < len(keyed) and keyed[j][0] == keyed[i][0]:
                j += 1
            if j - i > 1:
                ordered[i:j] = sorted(ordered[i:j], key=lambda h: repr(_plain(h)))
            i = j
    for rank, hit in enumerate(ordered):
        hit.rank = rank
    return ordered


def _score(hit: _Hit) -> float:
    """The score of a hit among scored ones (_scored: all have one, or none)."""
    assert hit.score is not None
    return hit.score


def _scored(hits: list[_Hit]) -> bool:
    scored = [h for h in hits if h.score is not None]
    if scored and len(scored) != len(hits):
        missing = next(h.index for h in hits if h.score is None)
        raise ValueError(f"hit {missing} has no score while others have one (pass score=...)")
    return bool(scored)


def _plain(hit: _Hit) -> Any:
    meta = hit.kind.meta(hit.obj)
    return (hit.ident, sorted((str(k), repr(v)) for k, v in meta.items()) if meta else None,
            None if hit.embedding is None else list(np.asarray(hit.embedding, dtype=float)))


# -- the function ----------------------------------------------------------------------------


def diversify(
    hits: Iterable[Any],
    k: int | None = None,
    *,
    text: str | Callable[[Any], str] | None = None,
    score: str | Callable[[Any], float] | None = None,
    embedding: str | Callable[[Any], Sequence[float]] | None = None,
    source: str | Callable[[Any], Any] | None = None,
    max_per_source: int | None = None,
    lambda_mult: float = 0.5,
    semantic_threshold: float = 0.95,
    drop_semantic: bool = False,
    explain: bool = False,
    near: bool = True,
    merge_overlaps: bool = True,
    cluster: str | Callable[[Any], Any] | None = None,
) -> Diversified:
    """Remove copies from retrieved ``hits`` and return at most ``k`` of them, best first.

    ``hits`` are strings, dicts, LangChain ``Document``, LlamaIndex ``NodeWithScore`` or
    Haystack ``Document`` objects, and come back as the same kind, copied where a field is
    added (the input is never modified). ``text``, ``score``, ``embedding``, ``source`` and
    ``cluster`` read a property from another field (a name) or with a function of the hit.
    Scores are "higher is better"; without any, the input order is the ranking.

    >>> page = "VACUUM reclaims storage occupied by dead tuples. " * 12
    >>> hits = [{"text": page, "score": 0.9, "url": "https://a/vacuum"},
    ...         {"text": page.upper(), "score": 0.8, "url": "https://mirror/vacuum"},
    ...         {"text": "ANALYZE collects statistics.", "score": 0.7, "url": "https://a/analyze"}]
    >>> [(h["url"], h.get("also_in")) for h in diversify(hits)]
    [('https://a/vacuum', ['https://mirror/vacuum']), ('https://a/analyze', None)]
    >>> print(diversify(hits, explain=True).explanation[0])
    hit 1 (https://mirror/vacuum): the same canonical text as hit 0; kept as result 0
    """
    hits = list(hits)
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise ValueError(f"k must be a positive int or None, got {k!r}")
    if max_per_source is not None and (not isinstance(max_per_source, int) or max_per_source < 1):
        raise ValueError(f"max_per_source must be a positive int or None, got {max_per_source!r}")
    if not 0.0 <= lambda_mult <= 1.0:
        raise ValueError(f"lambda_mult must be between 0 and 1, got {lambda_mult!r}")
    if not 0.0 < semantic_threshold <= 1.0:
        raise ValueError(f"semantic_threshold must be in (0, 1], got {semantic_threshold!r}")

    records = _read(hits, text, score, embedding, source, cluster)
    scored = _scored(records)
    ordered = _rank(records, scored)
    fingerprints: dict[str, Fingerprint] = {}
    kept = ordered
    while True:  # a merged passage may now be a copy of another hit: run the text steps again
        kept = _clusters(_exact(kept))
        if near:
            kept = _near(kept, fingerprints)
        if not merge_overlaps:
            break
        kept, changed = _merge_spans(kept)
        if not changed:
            break
        kept = _rank(kept, scored)  # a merged passage is ranked by its new text, as a later call would
    if max_per_source is not None:
        kept = _cap(kept, max_per_source)
    kept, flags = _semantic(kept, k, lambda_mult, semantic_threshold, drop_semantic, scored)
    return _output(records, kept, flags, explain)


def _output(records: list[_Hit], kept: list[_Hit], flags: dict[int, tuple[int, float]],
            explain: bool) -> Diversified:
    position = {id(h): pos for pos, h in enumerate(kept)}
    explanation: list[Explanation] = []
    if explain:
        for hit in records:
            if hit.reason is None and id(hit) in position and position[id(hit)] not in flags:
                continue
            if id(hit) in position:  # returned, flagged
                pos = position[id(hit)]
                like, cosine = flags[pos]
                explanation.append(Explanation(hit.index, "semantic_duplicate", kept[like].index, pos,
                                               hit.source, {"cosine": cosine}, hit.obj))
                continue
            root = hit
            while root.parent is not None:
                root = root.parent
            matched = hit.parent.index if hit.parent is not None else None
            assert hit.reason is not None  # a hit not returned as given always has one
            explanation.append(Explanation(hit.index, hit.reason, matched, position.get(id(root)),
                                           hit.source, dict(hit.detail), hit.obj))
    out = []
    for pos, hit in enumerate(kept):
        if not (hit.absorbed or hit.also_in or hit.merged or pos in flags):  # most hits: nothing to add
            meta = hit.kind.meta(hit.obj)
            if not meta or not (ALSO_IN in meta or SEMANTIC_DUPLICATE_OF in meta or SEMANTIC_SIMILARITY in meta):
                out.append(hit.obj)
                continue
        fields: dict[str, Any] = {}
        also_in = list(hit.also_in)
        own = {hit.label} if hit.label is not None else set()
        absorbed, stack = [], list(hit.absorbed)
        while stack:  # everything collapsed into this hit, directly or through another
            other = stack.pop()
            if other.reason in _SAME_CONTENT:
                absorbed.append(other)
            stack.extend(other.absorbed)
        for other in sorted(absorbed, key=lambda h: h.rank):  # in score order
            for label in (other.label, *other.also_in):
                if label is not None and label not in own and label not in also_in:
                    also_in.append(label)
        if also_in:
            fields[ALSO_IN] = also_in
        if pos in flags:
            like, cosine = flags[pos]
            fields[SEMANTIC_DUPLICATE_OF] = like
            fields[SEMANTIC_SIMILARITY] = cosine
        meta = hit.kind.meta(hit.obj)
        stale = tuple(f for f in _FIELDS if f not in fields and meta and f in meta)
        if fields or stale or hit.merged:
            out.append(hit.kind.replace(hit.obj, fields, stale, hit.text if hit.merged else None,
                                        hit.span if hit.merged else None))
        else:
            out.append(hit.obj)
    return Diversified(out, explanation)
