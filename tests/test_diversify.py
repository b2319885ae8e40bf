"""diversify(): query-time deduplication of retrieved hits, step by step."""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import scrapy_dedup
from scrapy_dedup import diversify
from scrapy_dedup.core.fingerprints import content_hash, fingerprint, near_match
from scrapy_dedup.core.text import _canonical_batch
from scrapy_dedup.query import diversifier as _div
from scrapy_dedup.query.diversifier import Diversified, Explanation, _features, _is_candidate, _key

WORDS = [f"w{i}" for i in range(2000)]


def passage(seed: int, n: int = 300) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n))


def edited(text: str, *positions: int) -> str:
    words = text.split()
    for p in positions:
        words[p] = "edited"
    return " ".join(words)


# -- import ---------------------------------------------------------------------------------


def run_python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_importing_the_module_loads_no_scrapy_and_no_framework():
    out = run_python(
        "import sys, scrapy_dedup.query, scrapy_dedup.query.integrations, scrapy_dedup.integrations\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('scrapy', 'twisted', 'langchain_core', 'llama_index', 'haystack')]\n"
        "print(bad)"
    )
    assert out.strip() == "[]"


def test_package_attribute_is_the_function_and_the_new_paths_do_not_warn():
    out = run_python(
        "import warnings\n"
        "warnings.simplefilter('error')\n"
        "import scrapy_dedup\n"
        "from scrapy_dedup import diversify\n"
        "from scrapy_dedup.query import Explanation, diversify as d2\n"
        "from scrapy_dedup.query.diversifier import Diversified, diversify as d3\n"
        "from scrapy_dedup.query.hits import resolve\n"
        "from scrapy_dedup.query.integrations.haystack import DiversifyRanker\n"
        "from scrapy_dedup.query.integrations.langchain import DiversifyCompressor\n"
        "from scrapy_dedup.query.integrations.llama_index import DiversifyPostprocessor\n"
        "assert scrapy_dedup.diversify is diversify is d2 is d3\n"
        "print(scrapy_dedup.diversify(['x', 'X']))"
    )
    assert out.strip() == "['x']"
    assert scrapy_dedup.diversify is diversify and callable(scrapy_dedup.diversify)
    assert "diversify" in scrapy_dedup.__all__


#: old path -> (a name read from it, its new module)
OLD_PATHS = {
    "scrapy_dedup.diversify": ("Explanation", "scrapy_dedup.query.diversifier"),
    "scrapy_dedup.hits": ("resolve", "scrapy_dedup.query.hits"),
    "scrapy_dedup.integrations.haystack": ("DiversifyRanker", "scrapy_dedup.query.integrations.haystack"),
    "scrapy_dedup.integrations.langchain": ("DiversifyCompressor", "scrapy_dedup.query.integrations.langchain"),
    "scrapy_dedup.integrations.llama_index": ("DiversifyPostprocessor",
                                              "scrapy_dedup.query.integrations.llama_index"),
    "scrapy_dedup.integrations.options": ("DiversifyOptions", "scrapy_dedup.query.integrations.options"),
}


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_old_import_paths_work_and_warn_with_the_new_place(old):
    import importlib

    name, new = OLD_PATHS[old]
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import {name} from {new}$") as caught:
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(new), name)
    assert caught[0].filename == __file__  # the warning points at the line that read the name


def test_old_module_path_of_diversify_keeps_the_package_attribute_the_function():
    out = run_python(
        "import warnings\n"
        "import scrapy_dedup.diversify\n"
        "import scrapy_dedup\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    from scrapy_dedup.diversify import diversify, Explanation\n"
        "assert [w.category for w in caught] == [DeprecationWarning] * 2, caught\n"
        "assert scrapy_dedup.diversify is diversify\n"
        "print(scrapy_dedup.diversify(['x', 'X']))"
    )
    assert out.strip() == "['x']"


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_the_exact_key_is_content_hash(text):
    assert _key(scrapy_dedup.canonical_text(text)) == content_hash(text)


# -- step 1: exact copies -----------------------------------------------------------------


def test_exact_copies_keep_the_best_scored_and_name_every_other_source():
    text = passage(1)
    hits = [
        {"text": text.upper(), "score": 0.5, "url": "https://mirror/a"},
        {"text": text, "score": 0.9, "url": "https://docs/a"},
        {"text": "  " + text.replace(" ", "\n"), "score": 0.7, "url": "https://old/a"},
        {"text": passage(2), "score": 0.8, "url": "https://docs/b"},
    ]
    before = copy.deepcopy(hits)
    out = diversify(hits)
    assert [h["url"] for h in out] == ["https://docs/a", "https://docs/b"]
    assert out[0]["also_in"] == ["https://old/a", "https://mirror/a"]  # in score order
    assert "also_in" not in out[1]
    assert hits == before  # the input is never modified
    assert isinstance(out, Diversified) and out.explanation == []


def test_strings_come_back_as_strings():
    assert diversify(["Same text", "same  TEXT", "other"]) == ["Same text", "other"]


def test_without_scores_the_input_order_is_the_ranking():
    out = diversify([{"text": "b", "id": 1}, {"text": "a", "id": 2}, {"text": "B", "id": 3}])
    assert [h["id"] for h in out] == [1, 2]
    assert out[0]["also_in"] == [3]  # no source: the id names the hit


def test_same_chunk_id_collapses_even_when_the_text_differs_in_form():
    out = diversify([{"text": "a chunk", "id": "c1", "score": 2}, {"text": "a chunk, reformatted", "id": "c1",
                                                                    "score": 1}], explain=True)
    assert len(out) == 1
    assert out.explanation[0].reason == "same_chunk" and out.explanation[0].matched == 0


# -- step 2: near copies --------------------------------------------------------------------


def test_near_copies_collapse_with_the_crawls_own_rule():
    base = passage(3)
    near = edited(base, 100, 200)
    unrelated = passage(4)
    assert near_match(fingerprint(base), fingerprint(near))[0]
    hits = [{"text": near, "score": 0.8, "source": "b"}, {"text": base, "score": 0.9, "source": "a"},
            {"text": unrelated, "score": 0.85, "source": "c"}]
    out = diversify(hits, explain=True)
    assert [h["source"] for h in out] == ["a", "c"]
    assert out[0]["also_in"] == ["b"]
    (why,) = out.explanation
    assert (why.index, why.reason, why.matched, why.kept_at) == (0, "near_duplicate", 1, 0)
    matched, distance, jaccard = near_match(fingerprint(base), fingerprint(near))
    assert why.detail == {"jaccard": jaccard, "distance": distance}
    assert str(why) == f"hit 0 (b): a near copy of hit 1 (jaccard {jaccard}, distance {distance}); kept as result 0"


def test_near_step_can_be_turned_off():
    base = passage(3)
    out = diversify([{"text": base, "score": 1}, {"text": edited(base, 5), "score": 0.5}], near=False)
    assert len(out) == 2


def test_short_texts_are_exact_only_as_in_the_crawl():
    short = passage(5, 30)
    assert len(diversify([short, edited(short, 10)])) == 2


def test_candidate_sampling_finds_every_pair_near_match_confirms():
    # Many edits at rising distance from one text: every pair the rule accepts must be a
    # candidate, i.e. share sampled features (the generator decides nothing itself).
    # Edits of 1 to 40 words in 300 span the borderline: near_match accepts down to J ~ 0.7.
    rng = np.random.default_rng(0)
    accepted = 0
    for seed in (6, 7, 8):
        base = passage(seed)
        texts = [base] + [edited(base, *rng.choice(300, size=int(m), replace=False)) for m in rng.integers(1, 40, 50)]
        fps = [fingerprint(t) for t in texts]
        shared, counts = _features([scrapy_dedup.canonical_text(t).encode() for t in texts])
        for i in range(len(texts)):
            for j in range(i):
                if near_match(fps[i], fps[j])[0]:
                    accepted += 1
                    common = len(set(shared[i].tolist()) & set(shared[j].tolist()))
                    assert _is_candidate(common, counts[i], counts[j]), (seed, i, j)
    assert accepted > 100  # the check had pairs to check


def _edit_family(seed: int, n: int = 40, most: int = 40) -> list[str]:
    rng = np.random.default_rng(seed)
    base = passage(seed)
    texts = [base, passage(seed + 100), passage(seed + 100)[:900] + base[:900]]  # a shared paragraph
    texts += [edited(base, *rng.choice(300, size=int(m), replace=False)) for m in rng.integers(1, most, n)]
    return texts


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_candidate_pairs_counted_at_once_are_the_pairs_of_shared_features(seed):
    # _candidate_pairs counts the shared features of every pair in one pass; the definition
    # is the intersection of the two texts' shared features, judged by _is_candidate.
    texts = _canonical_batch(_edit_family(seed))
    shared, counts = _features(texts)
    expected = [(i, j) for j in range(len(texts)) for i in range(j)
                if _is_candidate(len(set(shared[i].tolist()) & set(shared[j].tolist())), counts[i], counts[j])]
    i, j = _div._candidate_pairs(texts)
    assert list(zip(i, j)) == expected
    assert len(expected) > 100  # the family is close enough to give many


@pytest.mark.parametrize("seed", [14, 15])
def test_posting_lists_decide_as_the_pairs_do(seed):
    # Sets with too many feature pairs (many copies of one text) walk posting lists instead:
    # the same collapses, into the same hits.
    rng = np.random.default_rng(seed)
    hits = [{"text": t, "score": float(s), "url": f"u{k}"}
            for k, (t, s) in enumerate(zip(_edit_family(seed, most=12), rng.random(100)))]

    def decided(walk: bool) -> list[tuple[int, int | None]]:
        records = _div._rank(_div._read(hits, None, None, None, None, None), True)
        kept = _div._exact(records)
        if walk:
            pool = [h for h in kept if _div._eligible(h)]
            _div._near_posting(pool, [h.canonical for h in pool], lambda h: fingerprint(h.canonical.decode()))
        else:
            _div._near(kept, {})
        return [(h.index, None if h.parent is None else h.parent.index) for h in records]

    pairs, walked = decided(False), decided(True)
    assert pairs == walked
    assert sum(parent is not None for _, parent in pairs) > 8


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["alpha ", "beta ", "\u03b4\u03ad\u03bb\u03c4\u03b1 ", "\u4e2d\u6587", " "]),
                          st.integers(0, 12_000)), min_size=1, max_size=40))
def test_sampling_in_groups_equals_sampling_all_texts_joined(parts):
    # Features are sampled group by group (~128 KB each) for the CPU's cache; the groups must
    # see exactly the windows one pass over all texts joined sees, at their edges too.
    texts = [(word * repeat).encode() for word, repeat in parts]
    whole = _div._group_keys(texts, 0, True)
    grouped = _div._sampled_keys(texts)
    if grouped is None:
        assert len(whole) == 0
    else:
        assert np.array_equal(grouped[0], np.unique(whole))


def test_sampling_works_on_text_written_without_spaces():
    # a near duplicate is judged by words, \\w+ runs: in Chinese a clause between punctuation
    rng = np.random.default_rng(7)
    clauses = ["".join(chr(0x4E00 + int(c)) for c in rng.integers(0, 3000, int(n))) for n in rng.integers(6, 16, 120)]
    han = "".join(clause + ("。" if i % 4 == 3 else "，") for i, clause in enumerate(clauses))
    middle = len(han) // 2
    copy_ = han[:middle] + ("变" if han[middle] != "变" else "化") + han[middle + 1 :]
    assert near_match(fingerprint(han), fingerprint(copy_))[0]
    assert len(diversify([{"text": han, "score": 1}, {"text": copy_, "score": 0.5}])) == 1


def test_crawl_cluster_ids_are_used_for_whole_documents():
    a, b = passage(8), passage(9)  # different texts the crawl put in one cluster
    hits = [
        {"text": a, "score": 0.9, "url": "u1", "dedup": {"cluster_id": "c1", "content_hash": content_hash(a)}},
        {"text": b, "score": 0.8, "url": "u2", "dedup": {"cluster_id": "c1", "content_hash": content_hash(b)}},
    ]
    out = diversify(hits, explain=True)
    assert [h["url"] for h in out] == ["u1"] and out[0]["also_in"] == ["u2"]
    assert out.explanation[0].reason == "same_cluster"


def test_a_chunk_does_not_inherit_its_pages_cluster():
    # chunks of two pages of one cluster: their dedup field describes the page, not the chunk
    hits = [{"text": passage(10), "score": 1, "url": "u1", "dedup": {"cluster_id": "c1", "content_hash": "x" * 32}},
            {"text": passage(11), "score": 0.5, "url": "u2", "dedup": {"cluster_id": "c1", "content_hash": "y" * 32}}]
    assert len(diversify(hits)) == 2
    assert len(diversify(hits, cluster=lambda h: h["dedup"]["cluster_id"])) == 1


def test_different_crawl_clusters_are_not_compared_again():
    base = passage(12)
    near = edited(base, 40)
    hits = [{"text": base, "score": 1, "dedup": {"cluster_id": "c1", "content_hash": content_hash(base)}},
            {"text": near, "score": 0.5, "dedup": {"cluster_id": "c2", "content_hash": content_hash(near)}}]
    assert len(diversify(hits)) == 2


# -- step 3: overlapping spans --------------------------------------------------------------


def chunks(doc: str, size: int, step: int, source: str = "doc.html") -> list[dict]:
    return [{"text": doc[i : i + size], "start_index": i, "source": source}
            for i in range(0, len(doc) - size + 1, step)]


def test_overlapping_chunks_of_one_document_are_merged():
    doc = passage(13, 200)
    parts = chunks(doc, 400, 300)  # 100 characters of overlap
    hits = [dict(parts[1], score=0.9), dict(parts[2], score=0.7), dict(parts[0], score=0.5)]
    out = diversify(hits, explain=True)
    assert len(out) == 1
    merged = out[0]
    assert merged["start_index"] == 0 and merged["text"] == doc[: 600 + 400]
    assert merged["score"] == 0.9 and "also_in" not in merged  # same source
    assert sorted(e.reason for e in out.explanation) == ["overlapping_span", "overlapping_span"]


def test_adjacent_or_inconsistent_spans_are_not_merged():
    doc = passage(14, 200)
    adjacent = [dict(c, score=1.0 - i / 10) for i, c in enumerate(chunks(doc, 300, 300))]
    assert len(diversify(adjacent)) == len(adjacent)
    wrong = [{"text": "alpha beta gamma", "start_index": 0, "source": "d", "score": 1},
             {"text": "delta epsilon", "start_index": 5, "source": "d", "score": 0.5}]
    assert len(diversify(wrong)) == 2
    assert len(diversify(dict(h, source=f"d{i}") for i, h in enumerate(
        [dict(c, score=1.0 - i / 10) for i, c in enumerate(chunks(doc, 400, 300))]))) == 3
    assert len(diversify([dict(c, score=1.0) for c in chunks(doc, 400, 300)], merge_overlaps=False)) == 3


def test_a_merged_passage_that_copies_another_hit_collapses_into_it():
    doc = passage(15, 150)
    whole = {"text": doc, "score": 0.95, "source": "mirror.html"}
    parts = [{"text": doc[:600], "start_index": 0, "source": "doc.html", "score": 0.9},
             {"text": doc[500:], "start_index": 500, "source": "doc.html", "score": 0.8}]
    out = diversify([*parts, whole])
    assert [h["source"] for h in out] == ["mirror.html"] and out[0]["also_in"] == ["doc.html"]
    assert diversify(out) == out


# -- step 4: per-source cap ------------------------------------------------------------------


def test_max_per_source_keeps_the_best_of_each_source():
    hits = [{"text": passage(20 + i), "score": 1 - i / 10, "source": "a" if i < 4 else "b"} for i in range(6)]
    out = diversify(hits, max_per_source=2, explain=True)
    assert [h["score"] for h in out] == [1.0, 0.9, 0.6, 0.5]
    assert {(e.index, e.reason, e.matched, e.kept_at) for e in out.explanation} == {
        (2, "source_cap", None, None), (3, "source_cap", None, None)}
    assert len(diversify(hits)) == 6  # off by default


# -- step 5: MMR and semantic duplicates -------------------------------------------------------


def unit(*xs: float) -> list[float]:
    v = np.array(xs, dtype=float)
    return list(v / np.linalg.norm(v))


def test_mmr_over_given_embeddings_picks_diverse_hits_and_keeps_the_best_first():
    hits = [
        {"text": "a", "score": 0.9, "embedding": unit(1, 0, 0)},
        {"text": "b", "score": 0.85, "embedding": unit(1, 0.1, 0)},  # close to a
        {"text": "c", "score": 0.5, "embedding": unit(0, 1, 0)},
        {"text": "d", "score": 0.4, "embedding": unit(0, 0, 1)},
    ]
    out = diversify(hits, 3, explain=True)
    assert [h["text"] for h in out] == ["a", "c", "d"]  # in score order
    assert [(e.index, e.reason) for e in out.explanation] == [(1, "not_selected")]
    assert [h["text"] for h in diversify(hits, 3, lambda_mult=1.0)] == ["a", "b", "c"]  # relevance only
    assert [h["text"] for h in diversify(hits, 2)] == ["a", "c"]


def test_near_identical_embeddings_are_flagged_and_dropped_only_if_asked():
    hits = [{"text": "first wording", "score": 0.9, "embedding": unit(1, 0.01), "url": "u1"},
            {"text": "second wording", "score": 0.8, "embedding": unit(1, 0.02), "url": "u2"},
            {"text": "something else", "score": 0.7, "embedding": unit(0, 1), "url": "u3"}]
    out = diversify(hits, explain=True)
    assert [h["url"] for h in out] == ["u1", "u2", "u3"]
    assert out[1]["semantic_duplicate_of"] == 0 and out[1]["semantic_similarity"] >= 0.95
    assert "semantic_duplicate_of" not in out[0] and "semantic_duplicate_of" not in out[2]
    assert [(e.index, e.reason, e.matched, e.kept_at) for e in out.explanation] == [(1, "semantic_duplicate", 0, 1)]
    dropped = diversify(hits, drop_semantic=True, explain=True)
    assert [h["url"] for h in dropped] == ["u1", "u3"] and dropped[0]["also_in"] == ["u2"]
    assert dropped.explanation[0].reason == "semantic_duplicate" and dropped.explanation[0].kept_at == 0
    assert len(diversify(hits, semantic_threshold=1.0)) == 3
    assert all("semantic_duplicate_of" not in h for h in diversify(hits, semantic_threshold=0.99999))


def test_a_later_call_removes_a_stale_flag():
    hit = {"text": "x", "score": 1.0, "embedding": unit(1, 0), "semantic_duplicate_of": 3, "semantic_similarity": 0.97}
    assert diversify([hit]) == [{"text": "x", "score": 1.0, "embedding": unit(1, 0)}]


def test_hits_without_embeddings_among_others_are_never_penalised():
    hits = [{"text": "a", "score": 1, "embedding": unit(1, 0)}, {"text": "b", "score": 0.9},
            {"text": "c", "score": 0.8, "embedding": unit(1, 0.001)}]
    out = diversify(hits, 2)
    assert [h["text"] for h in out] == ["a", "b"]


def test_k_without_embeddings_is_top_k_after_collapsing():
    text = passage(30)
    hits = [{"text": text, "score": 1}, {"text": text.upper(), "score": 0.9}] + [
        {"text": passage(31 + i), "score": 0.8 - i / 100} for i in range(5)]
    out = diversify(hits, 3, explain=True)
    assert [h["score"] for h in out] == [1, 0.8, 0.79]
    assert [e.reason for e in out.explanation] == ["exact_duplicate", "not_selected", "not_selected", "not_selected"]


def test_a_thousand_hits_with_duplicates():
    base = [passage(100 + i) for i in range(200)]
    hits = []
    for i in range(1000):
        text = base[i % 200]
        if i >= 600:
            text = edited(text, i % 300)
        hits.append({"text": text, "score": float(i % 7), "url": f"u{i}"})
    out = diversify(hits)
    assert len(out) == 200
    assert sum(len(h.get("also_in", ())) for h in out) == 800


# -- input checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "hits, kwargs, error, message",
    [
        ([{"text": "a", "score": 1}, {"text": "b"}], {}, ValueError, "hit 1 has no score"),
        ([{"text": "a", "score": float("nan")}], {}, ValueError, "hit 0: score is NaN"),
        ([{"text": "a", "score": "high"}], {}, ValueError, "hit 0: score 'high' is not a number"),
        ([{"body": "a"}], {}, ValueError, "hit 0: no 'text'"),
        ([{"text": None}], {}, TypeError, "hit 0: text must be a str"),
        ([3], {}, TypeError, "cannot read a hit of type builtins.int"),
        (["a"], {"k": 0}, ValueError, "k must be a positive int"),
        (["a"], {"max_per_source": 0}, ValueError, "max_per_source"),
        (["a"], {"lambda_mult": 2}, ValueError, "lambda_mult"),
        (["a"], {"semantic_threshold": 0}, ValueError, "semantic_threshold"),
        (["a"], {"text": 5}, TypeError, "expected a field name or a function"),
        ([{"text": "a", "embedding": [1, 0]}, {"text": "b", "embedding": [1, 0, 0]}], {}, ValueError,
         "hit 1 has a 3-dimensional embedding"),
        ([{"text": "a", "embedding": [1, float("inf")]}], {}, ValueError, "hit 0 has an embedding with NaN"),
    ],
)
def test_bad_input_gets_a_clear_error(hits, kwargs, error, message):
    with pytest.raises(error, match=message):
        diversify(hits, **kwargs)


def test_fields_can_be_named_or_read_by_a_function():
    hits = [{"body": "same", "relevance": 0.2, "where": "a"}, {"body": "SAME", "relevance": 0.9, "where": "b"}]
    out = diversify(hits, text="body", score="relevance", source=lambda h: h["where"].upper())
    assert out == [{"body": "SAME", "relevance": 0.9, "where": "b", "also_in": ["A"]}]


def test_empty_input():
    assert diversify([]) == [] and diversify([], 3, explain=True).explanation == []


def test_explanation_is_a_value():
    e = Explanation(2, "source_cap", None, None, "a", {"max_per_source": 1})
    assert str(e) == "hit 2 (a): over max_per_source for its source (max_per_source 1)"


def test_doctests():
    import doctest
    import importlib

    for name in ("scrapy_dedup.query.diversifier", "scrapy_dedup.query.hits"):
        module = importlib.import_module(name)
        failures, tried = doctest.testmod(module)
        assert tried > 0 and failures == 0, name
