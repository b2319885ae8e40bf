"""Query-time deduplication: ``diversify()`` speed, and its quality on BM25 results over a doc site
crawled without dedup.

    .venv/bin/python benchmarks/bench_diversify.py [--size tiny|default|large] [--queries N]

Speed, on passages of 300 words cut from real page texts (the PostgreSQL 15 docs):

- 50 distinct hits, no embeddings (target <= 1 ms), and with 768-dimensional embeddings and
  ``k=10`` (MMR; target <= 5 ms); 1,000 distinct hits (target <= 20 ms); median of repeated
  calls. Side by side, the obvious way to apply the crawl's rule to a retrieved set:
  ``fingerprint()`` every hit and ``near_match`` every pair. CPU time of the calling thread is
  what the targets are judged on (the wall clock of a shared 2-core machine also counts waiting
  for a core); both are reported.
- Every call gets new hits (new dicts and str objects, built outside the clock; the cases of 50
  take a different 50 of the 1,000 passages each call): nothing from an earlier call is reused.
- The floor: the canonical text of the same hits alone, which the exact hash needs anyway, with
  the crawl's ``canonical_text`` one by one and as the batch ``diversify`` computes it.
- The same sizes with passages as a splitter returns them (the page's own line breaks, runs of
  spaces and NBSP between the words), and where the time of a call goes, stage by stage.
- 50 hits of which 20 are copies (10 exact, 10 with a word changed), as a set retrieved from
  an index that was never deduplicated looks: the copies have to be fingerprinted and confirmed.

Quality: the PostgreSQL 15.18 and 15.20 documentation plus a mirror (15.20 again under a second
host), so every page exists three times, as a crawl without dedup would store it; each page's
text cut into passages of 200 words; a BM25 index (bm25s) over all passages; one query per page
title of 15.20. For each query, the top 5 of BM25 and ``diversify(top 50, k=5)``. A passage is a
duplicate when an earlier passage of the same top 5 has the same canonical text or is a near
copy: by ``near_match`` on full fingerprints of the 5 (no sampling), and, independently, by an
exact word 5-shingle Jaccard >= 0.8. "Best hit kept": BM25's first passage is returned, or it
was collapsed into a copy of it that BM25 scored the same (copies tie in BM25 score, and BM25's
order among ties is arbitrary); "same passage" counts only the first.

Writes results/diversify.json.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _corpus  # noqa: E402
from run_all import RESULTS, SIZES, fmt, log, row, write_result  # noqa: E402

from scrapy_dedup import diversify  # noqa: E402
from scrapy_dedup.core.fingerprints import content_hash, fingerprint, near_match  # noqa: E402
from scrapy_dedup.core.text import _canonical_batch, canonical_text, tokenize  # noqa: E402

NAME = "diversify"
REPEATS = {"tiny": 5, "default": 200, "large": 500}
QUERIES = {"tiny": 15, "default": 600, "large": None}  # None: every title
#: pages per release in the quality corpus (None: all); tiny stays on the demo site's few pages
PAGES = {"tiny": 40, "default": None, "large": None}
PASSAGE_WORDS, SPEED_WORDS = 200, 300
CANDIDATES, TOP = 50, 5
TARGETS_MS = {"50": 1.0, "50+emb": 5.0, "1000": 20.0}
TARGET_DUPS, TARGET_BEST = 0.01, 0.99
MIRROR = "https://mirror.example.org/postgresql/15.20/"
COPY_REASONS = {"exact_duplicate", "near_duplicate", "same_chunk", "same_cluster", "overlapping_span"}
_TITLE = re.compile(rb"<title>(.*?)</title>", re.S | re.I)
_WORD = re.compile(r"\S+")


# -- speed ----------------------------------------------------------------------------------


def passages(texts: list[str], words: int, count: int, *, as_extracted: bool = False) -> list[str]:
    """``count`` distinct passages of ``words`` words cut from the texts; when the texts are
    too few (the tests' small site), the rest are drawn at random from their vocabulary.
    ``as_extracted`` keeps the page's own whitespace between the words (line breaks, runs of
    spaces, NBSP), as a splitter returns it; otherwise the words are joined by one space."""
    out, seen = [], set()
    for text in texts:
        spans = [m.span() for m in _WORD.finditer(text)]
        for start in range(0, len(spans) - words + 1, words):
            if as_extracted:
                piece = text[spans[start][0] : spans[start + words - 1][1]]
            else:
                piece = " ".join(text[a:b] for a, b in spans[start : start + words])
            if content_hash(piece) not in seen:
                seen.add(content_hash(piece))
                out.append(piece)
                if len(out) == count:
                    return out
    vocab = sorted({w for t in texts for w in t.split()})
    log(NAME, f"{len(out)} passages of {words} words in the corpus; {count - len(out)} more from its vocabulary")
    rng = np.random.default_rng(1)
    while len(out) < count:
        out.append(" ".join(vocab[i] for i in rng.integers(0, len(vocab), words)))
    return out


def timed(make, fn, repeats: int) -> dict[str, float]:
    """Wall and CPU (this thread's) milliseconds per call of ``fn(make(r))``. Every call gets
    inputs built for it beforehand, outside the clock (new dicts, new str objects, different
    passages where the case allows): nothing computed for an earlier call can be reused. On a
    shared machine the wall clock also counts waiting for a core; the targets are judged on
    the call's own CPU time."""
    inputs = [make(r) for r in range(repeats + 1)]
    fn(inputs.pop())  # warm: first calls pay for imports and numpy's dispatch caches
    wall, cpu = [], []
    for data in inputs:
        c0, t0 = time.thread_time(), time.perf_counter()
        fn(data)
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.thread_time() - c0) * 1e3)
    wall.sort()
    cpu.sort()
    return {"median_ms": statistics.median(wall), "p90_ms": wall[int(0.9 * (len(wall) - 1))], "best_ms": wall[0],
            "cpu_median_ms": statistics.median(cpu), "cpu_best_ms": cpu[0]}


def pairwise(hits: list[dict]) -> list[dict]:
    """The comparison: fingerprint every hit, compare every pair with near_match, keep the
    first of each group (what applying the crawl's rule to a retrieved set naively costs)."""
    fps = [fingerprint(h["text"]) for h in hits]
    kept: list[int] = []
    for j, fp in enumerate(fps):
        if not any(fps[i].content_hash == fp.content_hash or near_match(fps[i], fp)[0] for i in kept):
            kept.append(j)
    return [hits[j] for j in kept]


def fresh(hits: list[dict]) -> list[dict]:
    """New dicts with new str objects of the same texts (a str caches its hash and UTF-8)."""
    return [dict(h, text=(h["text"] + " ")[:-1]) for h in hits]


def phases(hits: list[dict]) -> dict[str, float]:
    """CPU milliseconds of diversify's stages on these hits: reading them (canonical text and
    exact hash included), the sampled features and candidate pairs, fingerprints and
    near_match of the candidates, the rest."""
    from scrapy_dedup.query import diversifier as div
    clock = time.thread_time
    t0 = clock()
    records = div._read(hits, None, None, None, None, None)
    t1 = clock()
    kept = div._clusters(div._exact(div._rank(records, div._scored(records))))
    pool = [h for h in kept if div._eligible(h)]
    t2 = clock()
    div._candidate_pairs([h.canonical for h in pool])
    t3 = clock()
    kept = div._near(kept, {})  # candidates again, then their fingerprints and near_match
    t4 = clock()
    kept, _ = div._merge_spans(kept)
    kept, flags = div._semantic(kept, None, 0.5, 0.95, False, True)
    div._output(records, kept, flags, False)
    t5 = clock()
    return {"read_canonical_hash": (t1 - t0) * 1e3, "features_candidates": (t3 - t2) * 1e3,
            "fingerprints_near_match": max(0.0, (t4 - t3) - (t3 - t2)) * 1e3,
            "rank_exact_merge_output": ((t2 - t1) + (t5 - t4)) * 1e3}


def speed(texts: list[str], repeats: int) -> dict[str, object]:
    rng = np.random.default_rng(0)
    # 1,000 passages that are not copies of each other (some pages of a doc site repeat whole
    # paragraphs; those belong to the case with copies, below).
    pool = list(diversify(passages(texts, SPEED_WORDS, 2000)))[:1000]
    raw_pool = list(diversify(passages(texts, SPEED_WORDS, 2000, as_extracted=True)))[:1000]
    if len(pool) < 1000 or len(raw_pool) < 1000:
        raise SystemExit(f"only {min(len(pool), len(raw_pool))} distinct passages of {SPEED_WORDS} words")
    scores = rng.random(1000)
    hits = [{"text": t, "score": float(s), "url": f"https://docs/{i}"} for i, (t, s) in enumerate(zip(pool, scores))]
    raw = [{"text": t, "score": float(s), "url": f"https://docs/{i}"} for i, (t, s) in enumerate(zip(raw_pool, scores))]
    vectors = rng.normal(size=(1000, 768)).astype(np.float32)
    copies = list(hits[:30])
    for i in range(10):  # 10 exact copies from other hosts, 10 with one word changed
        copies.append(dict(hits[i], url=f"https://mirror/{i}", score=hits[i]["score"] - 1e-3))
        words = hits[10 + i]["text"].split()
        words[len(words) // 2] = "changed"
        copies.append({"text": " ".join(words), "score": hits[10 + i]["score"] - 1e-3, "url": f"https://old/{i}"})

    def window(source: list[dict], r: int) -> list[dict]:  # call r gets passages 50r.. (mod 1,000)
        return fresh(source[50 * (r % 20) : 50 * (r % 20) + 50])

    def with_emb(r: int) -> list[dict]:
        lo = 50 * (r % 20)
        return [dict(h, embedding=vectors[lo + i].copy()) for i, h in enumerate(window(hits, r))]

    cases = {
        "50": (lambda r: window(hits, r), diversify),
        "50+emb": (with_emb, lambda h: diversify(h, 10)),
        "1000": (lambda r: fresh(hits), diversify),
        "50 with 20 copies": (lambda r: fresh(copies), diversify),
        "50 as extracted": (lambda r: window(raw, r), diversify),
        "1000 as extracted": (lambda r: fresh(raw), diversify),
        "50, canonical_text alone": (lambda r: window(hits, r), lambda h: [canonical_text(x["text"]) for x in h]),
        "50, batch canonical text alone": (lambda r: window(hits, r), lambda h: _canonical_batch([x["text"] for x in h])),
        "1000, canonical_text alone": (lambda r: fresh(hits), lambda h: [canonical_text(x["text"]) for x in h]),
        "1000, batch canonical text alone": (lambda r: fresh(hits), lambda h: _canonical_batch([x["text"] for x in h])),
        "50, pairwise near_match": (lambda r: window(hits, r), pairwise),
        "50 with 20 copies, pairwise near_match": (lambda r: fresh(copies), pairwise),
    }
    assert len(diversify(copies)) == 30 and len(pairwise(copies)) == 30 and len(diversify(hits)) == 1000
    out: dict[str, object] = {}
    for name, (make, fn) in cases.items():
        n = max(3, repeats // (10 if "1000" in name or "pairwise" in name else 1))
        out[name] = timed(make, fn, n)
        log(NAME, f"{name}: CPU median {out[name]['cpu_median_ms']:.3f} ms, wall median {out[name]['median_ms']:.3f} "
                  f"(p90 {out[name]['p90_ms']:.3f}, n={n})")
    # Where the time goes: medians of each stage over the same kind of cold calls.
    split = {}
    for name, make, n in (("50", lambda r: window(hits, r), repeats), ("1000", lambda r: fresh(hits), max(3, repeats // 10))):
        runs = [phases(make(r)) for r in range(n)]
        split[name] = {stage: statistics.median(run[stage] for run in runs) for stage in runs[0]}
        log(NAME, f"{name} by stage (CPU ms, median): " + ", ".join(f"{k} {v:.3f}" for k, v in split[name].items()))
    out["stages"] = split
    return out


# -- quality --------------------------------------------------------------------------------


def titles(root: Path, pages: list[str]) -> dict[str, str]:
    out = {}
    for page in pages:
        match = _TITLE.search((root / page).read_bytes()[:4096])
        if match:
            title = re.sub(r"\s+", " ", match.group(1).decode("utf-8", "replace")).strip()
            title = re.sub(r"^[0-9.]+\s*", "", title)  # section numbers are not what users type
            if title:
                out[page] = title
    return out


def load_site(size: str) -> tuple[list[dict], dict[str, str], str]:
    """Passages of every copy of every page, and {page: title} of the release queried."""
    if _corpus.PAGES_ENV in __import__("os").environ:  # the tests' small site: three copies of it
        root = _corpus.docs_root()
        pages = _corpus.html_pages(root)[: PAGES[size]]
        texts = _corpus.extracted_texts(root, pages)
        releases = {"a": (root, texts), "b": (root, texts)}
        label = f"{root.name} ({len(pages)} pages, copies a, b and a mirror)"
    else:
        releases = {}
        for release, spec in _corpus.POSTGRES_RELEASES.items():
            root = _corpus.package_dir(spec) / _corpus.POSTGRES_HTML
            pages = _corpus.html_pages(root)[: PAGES[size]]
            releases[release] = (root, _corpus.extracted_texts(root, pages))
        label = "postgresql-doc-15 15.18 + 15.20 + a mirror of 15.20"
    names = list(releases)
    copies = [(f"https://www.postgresql.org/docs/{names[0]}/", releases[names[0]][1]),
              (f"https://www.postgresql.org/docs/{names[1]}/", releases[names[1]][1]),
              (MIRROR, releases[names[1]][1])]
    hits = []
    for base, texts in copies:
        for page, text in texts.items():
            words = text.split()
            for n, start in enumerate(range(0, len(words), PASSAGE_WORDS)):
                hits.append({"text": " ".join(words[start : start + PASSAGE_WORDS]), "url": base + page,
                             "chunk": n})
    root = releases[names[1]][0]
    return hits, titles(root, list(releases[names[1]][1])), label


def shingles(text: str) -> set[tuple[str, ...]]:
    tokens = tokenize(canonical_text(text))
    return {tuple(tokens[i : i + 5]) for i in range(max(1, len(tokens) - 4))}


def duplicates(top: list[dict]) -> tuple[int, int]:
    """(passages of ``top`` that copy an earlier one by near_match, ... by exact 5-shingle
    Jaccard >= 0.8), both also counting identical canonical text."""
    fps = [fingerprint(h["text"]) for h in top]
    sets = [shingles(h["text"]) for h in top]
    by_rule = by_jaccard = 0
    for j in range(1, len(top)):
        earlier = range(j)
        if any(fps[i].content_hash == fps[j].content_hash or near_match(fps[i], fps[j])[0] for i in earlier):
            by_rule += 1
        if any(len(sets[i] & sets[j]) >= 0.8 * len(sets[i] | sets[j]) for i in earlier):
            by_jaccard += 1
    return by_rule, by_jaccard


def quality(size: str, n_queries: int | None) -> dict[str, object]:
    import bm25s

    hits, page_titles, label = load_site(size)
    log(NAME, f"{len(hits)} passages from {label}; indexing with bm25s {bm25s.__version__}")
    t0 = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([h["text"] for h in hits], stopwords="en", show_progress=False),
                    show_progress=False)
    index_s = time.perf_counter() - t0
    queries = sorted(set(page_titles.values()))
    if n_queries and len(queries) > n_queries:
        step = len(queries) / n_queries
        queries = [queries[int(i * step)] for i in range(n_queries)]
    tokens = bm25s.tokenize(queries, stopwords="en", show_progress=False)
    docs, scores = retriever.retrieve(tokens, k=min(CANDIDATES, len(hits)), show_progress=False, n_threads=1)
    totals = {"before": [0, 0, 0], "after": [0, 0, 0]}  # slots, dups by rule, dups by Jaccard
    best_same = best_kept = answered = 0
    div_ms = []
    for q in range(len(queries)):
        ranked = [dict(hits[int(d)], score=float(s)) for d, s in zip(docs[q], scores[q]) if s > 0]
        if not ranked:
            continue
        answered += 1
        t0 = time.perf_counter()
        kept = diversify(ranked, TOP, explain=True)
        div_ms.append((time.perf_counter() - t0) * 1e3)
        for name, top in (("before", ranked[:TOP]), ("after", kept)):
            rule, jac = duplicates(top)
            totals[name][0] += len(top)
            totals[name][1] += rule
            totals[name][2] += jac
        best = ranked[0]
        why = next((e for e in kept.explanation if e.index == 0), None)
        if why is None or why.reason == "semantic_duplicate" and why.kept_at is not None:
            best_same += 1  # returned as it was
            best_kept += 1
        elif why.reason in COPY_REASONS and why.kept_at is not None and kept[why.kept_at]["score"] == best["score"]:
            best_kept += 1  # collapsed into a copy the retriever scored the same: BM25's order among ties is arbitrary
    share = {name: {"slots": t[0], "dups_rule": t[1], "dups_jaccard": t[2],
                    "share_rule": t[1] / t[0] if t[0] else 0.0, "share_jaccard": t[2] / t[0] if t[0] else 0.0}
             for name, t in totals.items()}
    return {
        "corpus": label,
        "passages": len(hits),
        "passage_words": PASSAGE_WORDS,
        "queries": len(queries),
        "answered": answered,
        "candidates": CANDIDATES,
        "top": TOP,
        "index_s": index_s,
        "top5": share,
        "best_kept": best_kept / answered if answered else 0.0,
        "best_same_passage": best_same / answered if answered else 0.0,
        "diversify_ms_median": statistics.median(div_ms) if div_ms else None,
        "examples": queries[:5],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--queries", type=int, help="queries in the quality run (default by size)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    root = _corpus.docs_root()
    pages = _corpus.html_pages(root)[: PAGES[args.size] or None]
    texts = list(_corpus.extracted_texts(root, pages).values())
    sp = speed(texts, REPEATS[args.size])
    ql = quality(args.size, args.queries or QUERIES[args.size])
    rows, notes = summary(sp, ql)
    write_result(NAME, {"size": args.size, "results": {"speed": sp, "quality": ql}, "rows": rows, "notes": notes},
                 args.out)
    return 0


def summary(sp: dict, ql: dict) -> tuple[list[dict], list[str]]:
    """The result's rows and notes."""
    rows = []
    what = {"50": "50 hits of 300 words, no embeddings", "50+emb": "50 hits of 300 words, 768-d embeddings, k=10 (MMR)",
            "1000": "1,000 hits of 300 words", "50 with 20 copies": "50 hits of 300 words, 20 of them copies",
            "50 as extracted": "50 hits of 300 words with the page's own whitespace (line breaks, NBSP)",
            "1000 as extracted": "1,000 hits of 300 words with the page's own whitespace"}
    targets = {**TARGETS_MS, "50 as extracted": TARGETS_MS["50"], "1000 as extracted": TARGETS_MS["1000"]}
    for case in what:
        target = targets.get(case)
        cpu, wall = sp[case]["cpu_median_ms"], sp[case]["median_ms"]
        alt_case = {"50": "50, pairwise near_match", "50 with 20 copies": "50 with 20 copies, pairwise near_match"}.get(case)
        size = {"50": "50", "50+emb": "50", "1000": "1000"}.get(case)  # floors measured on the same texts
        parts, ratios = [], []
        if size:
            one, batch = sp[f"{size}, canonical_text alone"]["cpu_median_ms"], sp[f"{size}, batch canonical text alone"]["cpu_median_ms"]
            parts.append(f"canonical_text of the same texts one by one {fmt(one)} ms, as one batch {fmt(batch)} ms")
            ratios.append(f"{cpu / one:.1f}x canonical_text")
        if alt_case:
            alt = sp[alt_case]["cpu_median_ms"]
            parts.append(f"fingerprint + pairwise near_match {fmt(alt)} ms")
            ratios.append(f"{alt / cpu:.1f}x faster than pairwise")
        alternative, ratio = "; ".join(parts), "; ".join(ratios)
        rows.append(row(NAME, f"{what[case]}: CPU ms, median (wall median)", f"{fmt(cpu)} ({fmt(wall)})", alternative,
                        ratio, f"<= {target:g} ms" if target else "report", cpu <= target if target else None))
    before, after = ql["top5"]["before"], ql["top5"]["after"]
    rows.append(row(NAME, f"BM25 top 5, {ql['queries']} title queries on {ql['passages']:,} passages: duplicate passages "
                    "(near_match / 5-shingle Jaccard >= 0.8)",
                    f"{after['share_rule']:.1%} / {after['share_jaccard']:.1%}",
                    f"BM25 alone {before['share_rule']:.1%} / {before['share_jaccard']:.1%}", "",
                    f"<= {TARGET_DUPS:.0%}", max(after["share_rule"], after["share_jaccard"]) <= TARGET_DUPS))
    rows.append(row(NAME, "BM25 top 5: best hit kept (the passage, or a copy of it BM25 scored the same)",
                    f"{ql['best_kept']:.1%}", f"same passage {ql['best_same_passage']:.1%}", "",
                    f">= {TARGET_BEST:.0%}", ql["best_kept"] >= TARGET_BEST))
    notes = [f"quality corpus: {ql['corpus']}; {ql['passages']:,} passages of {PASSAGE_WORDS} words; "
             f"diversify(top {CANDIDATES}, k={TOP}) median {fmt(ql['diversify_ms_median'] or 0)} ms per query"]
    for case, stages in sp["stages"].items():
        notes.append(f"{case} hits by stage, CPU ms median: " + ", ".join(f"{k} {fmt(v)}" for k, v in stages.items()))
    return rows, notes


if __name__ == "__main__":
    sys.exit(main())
