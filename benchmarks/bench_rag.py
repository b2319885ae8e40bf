"""What a RAG corpus gains on real documentation: shared chunks after page dedup, boilerplate against
trafilatura's ``deduplicate=True``, chunking and heading costs, and Chinese and Japanese pages.

    .venv/bin/python benchmarks/bench_rag.py                # PostgreSQL 15.20, Python 3.11, SQLite 3.40, Debian Reference zh-cn / ja
    .venv/bin/python benchmarks/bench_rag.py --size tiny    # the demo site (no download)

Pages: Debian's documentation packages (benchmarks/_corpus.py downloads and unpacks them under
benchmarks/.cache/ when missing, and caches their extracted texts there). Each documentation set
is one host.

1. **Shared chunks after page-level dedup.** Every page goes through the content index the crawl
   uses (``ContentIndex`` on a ``MemoryStore``, texts given, default thresholds); the cluster
   representatives are chunked as the crawl chunks them (heading spans from the HTML, the host's
   boilerplate learned with the defaults) and settled in representative order
   (``settle_chunks``). Counted: chunks that are exact or near duplicates of a chunk of *another*
   document, and repeats inside one document, apart.
2. **Boilerplate removed, and unique content removed wrongly**, on the same representatives:
   this extension's per-host boilerplate (defaults) against trafilatura's ``deduplicate=True``
   (same extraction options otherwise). Ground truth: a paragraph (line, canonical text) that is
   on one page only is unique content. trafilatura keeps a per-process LRU of element texts and
   removes an element seen more than twice before, so its result depends on the order of the
   pages: it runs twice, over the pages in URL order and in reverse URL order, each in a fresh
   process.
3. **Costs**: chunks/s with and without heading spans; ms per page of ``heading_spans`` against
   ``extract_text`` on the same pages, in one process.
4. **CJK**: chunks per page, chunk sizes in fingerprint tokens, long lines cut at 。！？ or
   elsewhere, and the boilerplate share, on Debian Reference in Simplified Chinese and Japanese.

Writes benchmarks/results/rag.json (rows for run_all.py) and results/rag.md (the tables).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from scrapy_dedup.store.records import iter_clusters

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _corpus  # noqa: E402
from run_all import fmt, log as _log, row, write_result  # noqa: E402

from scrapy_dedup.core.boilerplate import BoilerplateLearner, paragraph_key, paragraphs, strip_boilerplate  # noqa: E402
from scrapy_dedup.core.chunk_status import settle_chunks  # noqa: E402
from scrapy_dedup.core.chunks import DEFAULT_CHUNK_WORDS, chunk_text  # noqa: E402
from scrapy_dedup.core.fingerprints import (  # noqa: E402
    DEFAULT_MAX_DISTANCE,
    DEFAULT_MIN_JACCARD,
    DEFAULT_MIN_TOKENS,
    fingerprint,
    raw_hash,
)
from scrapy_dedup.core.text import token_count  # noqa: E402
from scrapy_dedup.decide.index import ContentIndex, Document  # noqa: E402
from scrapy_dedup.extraction.headings import heading_spans  # noqa: E402
from scrapy_dedup.extraction.main_text import extract_text  # noqa: E402
from scrapy_dedup.store.memory import MemoryStore  # noqa: E402

RESULTS = HERE / "results"
NAME = "rag"
SITES = {
    "postgresql-15.20": ("postgresql-doc-15=15.20-0+deb12u1", Path("usr/share/doc/postgresql-doc-15/html")),
    "python-3.11": ("python3.11-doc=3.11.2-6+deb12u9", Path("usr/share/doc/python3.11/html")),
    "sqlite-3.40": ("sqlite3-doc=3.40.1-2+deb12u2", Path("usr/share/doc/sqlite3")),
}
CJK = {
    "debian-reference-zh-cn": ("debian-reference-zh-cn=2.100", Path("usr/share/debian-reference")),
    "debian-reference-ja": ("debian-reference-ja=2.100", Path("usr/share/debian-reference")),
}
DEMO = HERE.parent / "example_project" / "demo_site"
ORDERS = ("url order", "reverse url order")
LOW_SHARE = 0.1
TIMING_SAMPLE = {"tiny": 20, "default": 120, "large": 400}
HOST = "http://docs.example"
CJK_STOPS = "。！？"
LATIN_STOPS = ".!?…"


def log(message: str) -> None:
    _log(NAME, message)


# -- pages ------------------------------------------------------------------------------


def load(size: str) -> tuple[dict[str, tuple[Path, dict[str, str]]], dict[str, tuple[Path, dict[str, str]]]]:
    """{site: (root, {page: extracted text})} for the doc sites and for the CJK sites."""
    if size == "tiny":
        pages = [p for p in _corpus.html_pages(DEMO) if not p.startswith("_v2/")]
        return {"demo": (DEMO, _corpus.extracted_texts(DEMO, pages))}, {}
    out: list[dict[str, tuple[Path, dict[str, str]]]] = [{}, {}]
    for group, sites in zip(out, (SITES, CJK)):
        for site, (spec, html) in sites.items():
            root = _corpus.package_dir(spec) / html
            group[site] = (root, _corpus.extracted_texts(root, _corpus.html_pages(root)))
    return out[0], out[1]


def _html(root: Path, page: str) -> bytes:
    return (root / page).read_bytes()


# -- 1. page-level dedup, then chunks ---------------------------------------------------


def representatives(texts: dict[str, str]) -> tuple[list[str], dict[str, int]]:
    """Pages that represent their cluster after the content index took every page (text given),
    in representative order (one run: URL key), and the decisions' statuses."""
    path = f"bench-rag-{os.getpid()}-{time.monotonic_ns()}"
    store = MemoryStore(path, {"bench": NAME})
    try:
        store.begin_run()
        index = ContentIndex(store, store.run, max_distance=DEFAULT_MAX_DISTANCE, min_jaccard=DEFAULT_MIN_JACCARD,
                             min_tokens=DEFAULT_MIN_TOKENS)
        statuses: Counter[str] = Counter()
        for page in sorted(texts):
            url = f"{HOST}/{page}"
            doc = Document(key=url, url=url, fingerprint=fingerprint(texts[page]),
                           raw_hash=raw_hash(texts[page].encode("utf-8", "surrogatepass")))
            doc.text = texts[page]
            statuses[index.ingest(doc).status] += 1
        reps = sorted(c.representative.removeprefix(HOST + "/") for c in iter_clusters(store))
    finally:
        MemoryStore.discard(path)
    return reps, dict(statuses)


def learn_boilerplate(site: str, pages: list[str], texts: dict[str, str]) -> BoilerplateLearner:
    learner = BoilerplateLearner()
    for page in pages:
        learner.observe(site, f"{HOST}/{page}", texts[page])
    return learner


def shared_chunks(site: str, root: Path, pages: list[str], texts: dict[str, str], learner: BoilerplateLearner) -> dict:
    """Chunk the pages as the crawl does and settle them; count duplicates of other documents."""
    keys = learner.boilerplate_keys(site)
    documents = []
    for page in pages:
        text = texts[page]
        stripped = strip_boilerplate(text, keys)
        chunks = chunk_text(text, headings=heading_spans(_html(root, page), text), boilerplate=stripped.removed,
                            scope=page)
        documents.append((page, chunks))
    owner = {c.chunk_id: page for page, chunks in documents for c in chunks}
    by_id = {c.chunk_id: c for _, chunks in documents for c in chunks}
    statuses = settle_chunks(documents)
    counts: Counter[str] = Counter()
    chars: Counter[str] = Counter()
    shared: Counter[str] = Counter()  # source chunk id -> documents repeating it
    for s in statuses:
        n = len(by_id[s.chunk_id].text)
        if s.duplicate_of is None:
            kind = s.status
        elif owner[s.duplicate_of] == s.document_id:
            kind = f"{s.status} (same document)"
        else:
            kind = f"{s.status} (other document)"
            shared[s.duplicate_of] += 1
        counts[kind] += 1
        chars[kind] += n
    total, total_chars = len(statuses), sum(chars.values())
    cross = counts["exact_duplicate (other document)"] + counts["near_duplicate (other document)"]
    cross_chars = chars["exact_duplicate (other document)"] + chars["near_duplicate (other document)"]
    top = [
        {"documents": n + 1, "tokens": by_id[cid].tokens, "text": " ".join(by_id[cid].text.split())[:100]}
        for cid, n in shared.most_common(8)
    ]
    return {
        "documents": len(pages),
        "chunks": total,
        "statuses": dict(counts),
        "chars_by_status": dict(chars),
        "share_duplicate_of_other_document": round(cross / max(total, 1), 4),
        "share_of_chars_duplicate_of_other_document": round(cross_chars / max(total_chars, 1), 4),
        "share_exact_other": round(counts["exact_duplicate (other document)"] / max(total, 1), 4),
        "share_near_other": round(counts["near_duplicate (other document)"] / max(total, 1), 4),
        "most_shared": top,
    }


# -- 2. boilerplate: this extension against trafilatura's deduplicate=True -----------------


def _trafilatura_dedup_texts(job: tuple[str, list[str]]) -> list[str]:
    """trafilatura.extract(..., deduplicate=True) over pages in the given order, in this (fresh)
    process: its LRU is per process. Options otherwise those of extract_text."""
    import trafilatura

    from scrapy_dedup.extraction.main_text import _cut_long_tags, _decode

    root, paths = job
    out = []
    for path in paths:
        text = _cut_long_tags(_decode((Path(root) / path).read_bytes()))
        result = trafilatura.extract(
            text, url="file://" + str(Path(root) / path), fast=True, favor_precision=False, favor_recall=False,
            include_tables=True, include_comments=False, deduplicate=True, output_format="txt",
            with_metadata=False, include_images=False, include_links=False, include_formatting=False,
        )
        out.append(result or "")
    return out


def trafilatura_dedup(site: str, root: Path, pages: list[str]) -> dict[str, dict[str, str]]:
    """{order: {page: text}}, cached in benchmarks/.cache/texts like the plain extraction."""
    import trafilatura

    orders = {ORDERS[0]: sorted(pages), ORDERS[1]: sorted(pages, reverse=True)}
    digest = hashlib.sha256(json.dumps([str(root), sorted(pages), trafilatura.__version__]).encode()).hexdigest()[:16]
    cache = _corpus.TEXTS / f"{site}-trafilatura-dedup-{digest}.json"
    if cache.exists():
        return json.loads(cache.read_text(encoding="utf-8"))
    log(f"{site}: trafilatura deduplicate=True over {len(pages)} pages in {len(orders)} orders (one fresh process each)")
    start = time.perf_counter()
    # one task per process: trafilatura's LRU must start empty for each order
    with ProcessPoolExecutor(max_workers=2, max_tasks_per_child=1) as pool:
        results = list(pool.map(_trafilatura_dedup_texts, [(str(root), paths) for paths in orders.values()]))
    log(f"{site}: done in {time.perf_counter() - start:.0f} s")
    out = {order: dict(zip(paths, texts)) for (order, paths), texts in zip(orders.items(), results)}
    _corpus.TEXTS.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(out, ensure_ascii=False), encoding="utf-8")
    return out


def _line_keys(text: str) -> list[tuple[str, int]]:
    out = []
    for a, b in paragraphs(text):
        key = paragraph_key(text[a:b])
        if key:
            out.append((key, b - a))
    return out


def removal(pages: list[str], base: dict[str, str], removed_lines: dict[str, Counter[str]]) -> dict:
    """Characters of the removed lines, and of those that were unique content (on one page only)."""
    df: Counter[str] = Counter()
    length: dict[tuple[str, str], int] = {}
    for page in pages:
        keys = _line_keys(base[page])
        df.update({k for k, _ in keys})
        for k, n in keys:
            length.setdefault((page, k), n)
    total = sum(len(base[p]) for p in pages)
    removed = unique = 0
    pages_touched = 0
    for page in pages:
        lines = removed_lines.get(page, Counter())
        if lines:
            pages_touched += 1
        for key, count in lines.items():
            n = length.get((page, key), 0) * count
            removed += n
            if df[key] == 1:
                unique += n
    unique_total = sum(n for (page, k), n in length.items() if df[k] == 1)
    return {
        "chars": total,
        "removed_chars": removed,
        "removed_share": round(removed / max(total, 1), 4),
        "unique_removed_chars": unique,
        "unique_removed_share_of_unique": round(unique / max(unique_total, 1), 5),
        "pages_with_removals": pages_touched,
    }


def boilerplate_side_by_side(site: str, root: Path, pages: list[str], texts: dict[str, str],
                             learner: BoilerplateLearner) -> dict:
    keys = learner.boilerplate_keys(site)
    ours: dict[str, Counter[str]] = {}
    for page in pages:
        text = texts[page]
        cut = strip_boilerplate(text, keys).removed
        ours[page] = Counter(paragraph_key(text[a:b]) for a, b in cut)
    result = {"this extension (defaults)": removal(pages, texts, ours),
              "boilerplate paragraphs learned": len(keys)}
    # a lower share, to show what the method takes when it does take something
    low = BoilerplateLearner(share=LOW_SHARE)
    for page in pages:
        low.observe(site, f"{HOST}/{page}", texts[page])
    low_keys = low.boilerplate_keys(site)
    cut = {p: Counter(paragraph_key(texts[p][a:b]) for a, b in strip_boilerplate(texts[p], low_keys).removed)
           for p in pages}
    result[f"this extension (share {LOW_SHARE})"] = removal(pages, texts, cut)
    dedup = trafilatura_dedup(site, root, pages)
    for order, got in dedup.items():
        lost: dict[str, Counter[str]] = {}
        added = 0
        for page in pages:
            before = Counter(k for k, _ in _line_keys(texts[page]))
            after = Counter(k for k, _ in _line_keys(got.get(page, "")))
            lost[page] = before - after
            added += sum((after - before).values())
        res = removal(pages, texts, lost)
        res["lines_not_in_plain_extraction"] = added
        result[f"trafilatura deduplicate=True, {order}"] = res
    a, b = (dedup[o] for o in ORDERS)
    result["trafilatura pages whose text differs between the two orders"] = sum(a.get(p) != b.get(p) for p in pages)
    return result


# -- 3. costs ---------------------------------------------------------------------------


def costs(root: Path, pages: list[str], texts: dict[str, str], sample: int) -> dict:
    rng = np.random.default_rng(11)
    chosen = sorted(rng.choice(len(pages), size=min(sample, len(pages)), replace=False))
    extract_s = headings_s = 0.0
    for i in chosen:
        body = _html(root, pages[i])
        t0 = time.perf_counter()
        text = extract_text(body, "file://" + pages[i])
        t1 = time.perf_counter()
        heading_spans(body, text)
        headings_s += time.perf_counter() - t1
        extract_s += t1 - t0
    spans = {p: heading_spans(_html(root, p), texts[p]) for p in pages}
    timings = {}
    for label, given in (("without heading spans", False), ("with heading spans", True)):
        start = time.perf_counter()
        n = sum(len(chunk_text(texts[p], headings=spans[p] if given else None)) for p in pages)
        elapsed = time.perf_counter() - start
        timings[label] = {"chunks": n, "chunks_per_s": round(n / elapsed) if elapsed else None,
                          "pages_per_s": round(len(pages) / elapsed) if elapsed else None}
    found = sum(len(s) for s in spans.values())
    return {
        "sample_pages": len(chosen),
        "extract_ms_per_page": round(1000 * extract_s / max(len(chosen), 1), 2),
        "heading_spans_ms_per_page": round(1000 * headings_s / max(len(chosen), 1), 2),
        "heading_spans_vs_extraction": round(headings_s / extract_s, 4) if extract_s else None,
        "chunking": timings,
        "heading_spans_found": found,
        "pages_with_heading_spans": sum(1 for s in spans.values() if s),
    }


# -- 4. CJK -----------------------------------------------------------------------------


def cjk(site: str, root: Path, texts: dict[str, str]) -> dict:
    pages = sorted(texts)
    learner = learn_boilerplate(site, pages, texts)
    keys = learner.boilerplate_keys(site)
    tokens, per_page, content_tokens = [], [], []
    cuts: Counter[str] = Counter()
    lines_over = 0
    removed = 0
    for page in pages:
        text = texts[page]
        stripped = strip_boilerplate(text, keys)
        removed += stripped.removed_chars()
        chunks = chunk_text(text, headings=heading_spans(_html(root, page), text), boilerplate=stripped.removed)
        per_page.append(len(chunks))
        tokens += [c.tokens for c in chunks]
        content_tokens += [c.tokens for c in chunks if not c.boilerplate]
        line_ends = set()
        for a, b in paragraphs(text):
            line_ends.update((a, b))
            if token_count(text[a:b]) > DEFAULT_CHUNK_WORDS:
                lines_over += 1
        for c in chunks:  # a chunk that ends inside a line: where was that line cut?
            if c.end in line_ends or c.end >= len(text) or text[c.end] == "\n":
                continue
            last = text[: c.end].rstrip()[-1:]
            cuts["at 。！？" if last and last in CJK_STOPS else "at . ! ?" if last and last in LATIN_STOPS
                 else "between words or characters"] += 1
    tokens_arr = np.array(tokens or [0])
    content_arr = np.array(content_tokens or [0])
    total = sum(len(t) for t in texts.values())
    return {
        "pages": len(pages),
        "chars": total,
        "chunks": len(tokens),
        "chunks_per_page": {"mean": round(float(np.mean(per_page)), 1), "min": int(min(per_page)),
                            "max": int(max(per_page))},
        "tokens": {q: int(np.percentile(tokens_arr, p)) for q, p in (("p10", 10), ("p50", 50), ("p90", 90), ("p99", 99))}
        | {"max": int(tokens_arr.max())},
        "chunks_under_min_tokens": round(float((tokens_arr < DEFAULT_MIN_TOKENS).mean()), 4),
        "content_chunks": len(content_tokens),
        "content_tokens": {q: int(np.percentile(content_arr, p)) for q, p in (("p10", 10), ("p50", 50), ("p90", 90))},
        "content_chunks_under_min_tokens": round(float((content_arr < DEFAULT_MIN_TOKENS).mean()), 4),
        "lines": sum(1 for t in texts.values() for _ in paragraphs(t)),
        "lines_over_cap": lines_over,
        "cuts_inside_lines": dict(cuts),
        "boilerplate_paragraphs": len(keys),
        "boilerplate_share_of_chars": round(removed / max(total, 1), 4),
        "learned": [{"pages": p.pages, "text": p.text[:60]} for p in learner.learned(site)[:6]],
        "heading_spans": sum(len(heading_spans(_html(root, p), texts[p])) for p in pages),
    }


# -- report -----------------------------------------------------------------------------


def markdown(report: dict) -> str:
    lines = ["# RAG corpus measures on real documentation", "",
             f"Generated {report['generated']} by benchmarks/bench_rag.py (size {report['size']}).", ""]
    sites = report["sites"]
    lines += ["## Chunks shared between documents, after page-level dedup", "",
              f"Chunks of the cluster representatives (cap {DEFAULT_CHUNK_WORDS} words, heading spans, boilerplate "
              "with the defaults), settled in representative order.", "",
              "| site | pages | documents after page dedup | chunks | duplicate of another document (exact + near) "
              "| exact | near | share of characters | repeats inside one document | without page dedup |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for site, r in sites.items():
        c = r["chunks"]
        same = sum(v for k, v in c["statuses"].items() if "same document" in k)
        lines.append(f"| {site} | {r['pages']} | {c['documents']} | {c['chunks']:,} | "
                     f"{c['share_duplicate_of_other_document']:.1%} | {c['share_exact_other']:.1%} | "
                     f"{c['share_near_other']:.1%} | {c['share_of_chars_duplicate_of_other_document']:.1%} | {same} | "
                     f"{r['chunks_before_page_dedup']['share_duplicate_of_other_document']:.1%} of "
                     f"{r['chunks_before_page_dedup']['chunks']:,} |")
    for site, r in sites.items():
        lines += ["", f"Most shared chunks, {site}:", "", "| documents | tokens | chunk |", "|---|---|---|"]
        lines += [f"| {t['documents']} | {t['tokens']} | {t['text'].replace('|', '/')} |" for t in r["chunks"]["most_shared"]]
    lines += ["", "## Boilerplate removed, and unique content removed wrongly", "",
              "Same representatives. Unique content: lines (canonical text) on one page only.", "",
              "| site | method | characters removed | share of text | unique content removed (share of unique) | pages touched |",
              "|---|---|---|---|---|---|"]
    for site, r in sites.items():
        for method, m in r["boilerplate"].items():
            if not isinstance(m, dict):
                continue
            lines.append(f"| {site} | {method} | {m['removed_chars']:,} | {m['removed_share']:.2%} | "
                         f"{m['unique_removed_chars']:,} ({m['unique_removed_share_of_unique']:.2%}) | "
                         f"{m['pages_with_removals']} |")
    lines += [""] + [f"- {site}: trafilatura gives a different text for "
                     f"{r['boilerplate']['trafilatura pages whose text differs between the two orders']} pages "
                     "in the two orders." for site, r in sites.items()]
    lines += ["", "## Costs (one process)", "",
              "| site | extract_text ms/page | heading_spans ms/page | ratio | chunks/s without / with heading spans "
              "| heading spans found (pages) |", "|---|---|---|---|---|---|"]
    for site, r in sites.items():
        k = r["costs"]
        ch = k["chunking"]
        lines.append(f"| {site} | {k['extract_ms_per_page']} | {k['heading_spans_ms_per_page']} | "
                     f"{k['heading_spans_vs_extraction']:.1%} | {fmt(ch['without heading spans']['chunks_per_s'])} / "
                     f"{fmt(ch['with heading spans']['chunks_per_s'])} | {k['heading_spans_found']} "
                     f"({k['pages_with_heading_spans']}) |")
    if report["cjk"]:
        lines += ["", "## Chinese and Japanese pages", "",
                  "| site | pages | chunks (per page: mean, min-max) | tokens p10 / p50 / p90 / p99 / max | chunks < 50 tokens "
                  "| non-boilerplate chunks: tokens p10 / p50 / p90, < 50 tokens "
                  "| lines over the cap | cuts inside lines | boilerplate share |", "|---|---|---|---|---|---|---|---|---|"]
        for site, r in report["cjk"].items():
            t, cp, ct = r["tokens"], r["chunks_per_page"], r["content_tokens"]
            cuts = ", ".join(f"{k}: {v}" for k, v in sorted(r["cuts_inside_lines"].items())) or "none"
            lines.append(f"| {site} | {r['pages']} | {r['chunks']} ({cp['mean']}, {cp['min']}-{cp['max']}) | "
                         f"{t['p10']} / {t['p50']} / {t['p90']} / {t['p99']} / {t['max']} | "
                         f"{r['chunks_under_min_tokens']:.1%} | {r['content_chunks']}: {ct['p10']} / {ct['p50']} / {ct['p90']}, "
                         f"{r['content_chunks_under_min_tokens']:.1%} | {r['lines_over_cap']} of {r['lines']:,} | {cuts} | "
                         f"{r['boilerplate_share_of_chars']:.1%} ({r['boilerplate_paragraphs']} paragraphs) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", choices=("tiny", "default", "large"), default="default")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sites, cjk_sites = load(args.size)
    report: dict = {"generated": time.strftime("%Y-%m-%d %H:%M"), "size": args.size, "sites": {}, "cjk": {}}
    rows, notes = [], []
    for site, (root, texts) in sites.items():
        log(f"{site}: {len(texts)} pages")
        reps, statuses = representatives(texts)
        learner = learn_boilerplate(site, reps, texts)
        res = {
            "pages": len(texts),
            "page_statuses": statuses,
            "chunks": shared_chunks(site, root, reps, texts, learner),
            "chunks_before_page_dedup": shared_chunks(site, root, sorted(p for p, t in texts.items() if t.strip()), texts,
                                                      learn_boilerplate(site, sorted(texts), texts)),
            "boilerplate": boilerplate_side_by_side(site, root, reps, texts, learner),
            "costs": costs(root, reps, texts, TIMING_SAMPLE[args.size]),
        }
        report["sites"][site] = res
        c, b, k = res["chunks"], res["boilerplate"], res["costs"]
        ours = b["this extension (defaults)"]
        traf = [b[f"trafilatura deduplicate=True, {o}"] for o in ORDERS]
        rows += [
            row(NAME, f"{site}: chunks duplicating another document after page dedup (exact + near)",
                f"{c['share_duplicate_of_other_document']:.1%} of {c['chunks']:,}", "", "", "report"),
            row(NAME, f"{site}: text removed as boilerplate; unique content removed",
                f"{ours['removed_share']:.2%}; {ours['unique_removed_chars']:,} chars",
                "trafilatura dedup " + " / ".join(f"{t['removed_share']:.2%}; {t['unique_removed_chars']:,} chars" for t in traf)
                + " (two page orders)", "", "no unique content removed", ours["unique_removed_chars"] == 0),
            row(NAME, f"{site}: chunks/s without / with heading spans",
                f"{fmt(k['chunking']['without heading spans']['chunks_per_s'])} / "
                f"{fmt(k['chunking']['with heading spans']['chunks_per_s'])}", "", "", "report"),
            row(NAME, f"{site}: heading_spans ms/page vs extract_text", f"{k['heading_spans_ms_per_page']}",
                f"extract_text {k['extract_ms_per_page']}", f"{k['heading_spans_vs_extraction']:.1%}", "report"),
        ]
    for site, (root, texts) in cjk_sites.items():
        log(f"{site}: {len(texts)} pages")
        r = cjk(site, root, texts)
        report["cjk"][site] = r
        rows.append(row(NAME, f"{site}: chunks/page; tokens p50 / p99; boilerplate share",
                        f"{r['chunks_per_page']['mean']}; {r['tokens']['p50']} / {r['tokens']['p99']}; "
                        f"{r['boilerplate_share_of_chars']:.1%}", "", "", "report"))
    if not cjk_sites:
        notes.append("CJK pages are Debian downloads: not measured at --size tiny")
    text = markdown(report)
    write_result(NAME, {"size": args.size, "results": report, "rows": rows, "notes": notes}, args.out)
    (args.out / f"{NAME}.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
