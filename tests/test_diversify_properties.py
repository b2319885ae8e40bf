"""Properties of diversify() over generated retrieved sets full of copies: idempotent, blind to
input order, never returns a pair it was asked to collapse, never loses a source."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from scrapy_dedup import canonical_text, diversify
from scrapy_dedup.core.fingerprints import fingerprint, near_match

WORDS = [f"t{i}" for i in range(400)]
BASES = [" ".join(WORDS[j] for j in np.random.default_rng(i).integers(0, len(WORDS), 80)) for i in range(6)]
DIRECTIONS = [np.random.default_rng(100 + i).normal(size=8) for i in range(4)]


@st.composite
def hit_sets(draw, max_hits: int = 14, with_embeddings: bool | None = None):
    """Hits drawn from a few base passages: exact copies (case, spacing), near copies (a word or
    two replaced), short passages, overlapping chunks of one document; scores from a small set so
    that ties are common; sources from a small set so that they repeat."""
    embed = draw(st.booleans()) if with_embeddings is None else with_embeddings
    n = draw(st.integers(1, max_hits))
    hits = []
    for i in range(n):
        base = draw(st.integers(0, len(BASES) - 1))
        form = draw(st.sampled_from(["same", "upper", "spaced", "edit", "edit2", "short", "chunk"]))
        words = BASES[base].split()
        hit: dict = {"id": f"h{i}"}
        if form == "upper":
            text = BASES[base].upper()
        elif form == "spaced":
            text = "  " + BASES[base].replace(" ", " \n ")
        elif form in ("edit", "edit2"):
            for _ in range(1 if form == "edit" else 2):
                words[draw(st.integers(0, len(words) - 1))] = draw(st.sampled_from(["x", "y", "z"]))
            text = " ".join(words)
        elif form == "short":
            text = " ".join(words[: draw(st.integers(1, 12))])
        elif form == "chunk":
            start = draw(st.integers(0, 3)) * 100
            text = BASES[base][start : start + 180]
            hit["start_index"] = start
            hit["doc_id"] = f"doc{base}"
        else:
            text = BASES[base]
        hit["text"] = text
        hit["score"] = draw(st.sampled_from([0.5, 0.7, 0.9]))
        if draw(st.booleans()):
            hit["source"] = draw(st.sampled_from(["a", "b", "c", "d"]))
        if embed:
            vec = DIRECTIONS[base % len(DIRECTIONS)] + draw(st.sampled_from([0.0, 0.01, 1.0])) * DIRECTIONS[
                (base + 1) % len(DIRECTIONS)]
            hit["embedding"] = [float(x) for x in vec]
        hits.append(hit)
    return hits


OPTIONS = st.fixed_dictionaries({
    "k": st.none() | st.integers(1, 6),
    "max_per_source": st.none() | st.integers(1, 2),
    "drop_semantic": st.booleans(),
    "lambda_mult": st.sampled_from([0.0, 0.5, 1.0]),
})
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(hit_sets(), OPTIONS)
def test_idempotent(hits, options):
    once = diversify(hits, **options)
    assert diversify(once, **options) == once


@FAST
@given(hit_sets(), OPTIONS, st.randoms(use_true_random=False))
def test_input_order_does_not_change_the_result(hits, options, rnd):
    # Scores come from a small set, so most permutations reorder equal-score hits.
    shuffled = list(hits)
    rnd.shuffle(shuffled)
    assert diversify(shuffled, **options) == diversify(hits, **options)


@FAST
@given(hit_sets(), OPTIONS)
def test_never_returns_a_pair_it_was_asked_to_collapse(hits, options):
    out = diversify(hits, **options)
    keys = [canonical_text(h["text"]) for h in out]
    assert len(set(keys)) == len(keys), "exact copies returned"
    ids = [h["id"] for h in out]
    assert len(set(ids)) == len(ids), "one chunk returned twice"
    fps = [fingerprint(h["text"]) for h in out]
    for i in range(len(out)):
        for j in range(i):
            assert not near_match(fps[i], fps[j])[0], "near copies returned"
    spans = [(h["doc_id"], h["start_index"], h["start_index"] + len(h["text"])) for h in out if "doc_id" in h]
    for a in spans:
        for b in spans:
            if a is not b and a[0] == b[0]:
                assert a[2] <= b[1] or b[2] <= a[1], "overlapping chunks of one document returned"
    if options["max_per_source"]:
        sources = [h["source"] for h in out if "source" in h]
        assert all(sources.count(s) <= options["max_per_source"] for s in sources)
    if options["k"]:
        assert len(out) <= options["k"]
    if options["drop_semantic"] and any("embedding" in h for h in out):
        unit = np.array([h["embedding"] for h in out], dtype=float)
        unit /= np.linalg.norm(unit, axis=1)[:, None]
        sims = unit @ unit.T
        assert (sims[np.triu_indices(len(out), 1)] < 0.95 + 1e-6).all(), "semantic duplicates returned"
    assert all("semantic_duplicate_of" not in h for h in out) or not options["drop_semantic"]
    # The best-scored hit is always kept, first.
    assert out and out[0]["score"] == max(h["score"] for h in hits)


@FAST
@given(hit_sets(), OPTIONS)
def test_never_loses_a_source(hits, options):
    out = diversify(hits, explain=True, **options)
    returned = {h["id"] for h in out}
    explained = {e.index for e in out.explanation}
    for index, hit in enumerate(hits):
        assert hit["id"] in returned or index in explained, f"hit {index} vanished"
    for e in out.explanation:
        assert e.reason in {"same_chunk", "exact_duplicate", "same_cluster", "near_duplicate", "overlapping_span",
                            "source_cap", "semantic_duplicate", "not_selected"}
        if e.kept_at is not None:
            # whoever it matched, the hit standing for it carries its source
            kept = out[e.kept_at]
            label = hits[e.index].get("source", hits[e.index]["id"])
            assert e.kept_at == next(i for i, h in enumerate(out) if h["id"] == kept["id"])
            assert label == kept.get("source", kept["id"]) or label in kept.get("also_in", []) or (
                e.reason == "semantic_duplicate" and hits[e.index]["id"] == kept["id"])


@FAST
@given(hit_sets(with_embeddings=False))
def test_collapsing_content_alone_names_every_source(hits):
    # Without k or a cap, nothing is left out: every source is returned or in an also_in.
    out = diversify(hits)
    named = set()
    for h in out:
        named.add(h.get("source", h["id"]))
        named.update(h.get("also_in", []))
    for h in hits:
        assert h.get("source", h["id"]) in named
