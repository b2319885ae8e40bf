"""Chunk sizes and per-host boilerplate on real documentation: the measurements behind the defaults.

    .venv/bin/python benchmarks/bench_chunks.py               # PostgreSQL 15.20 and Python 3.11 docs
    .venv/bin/python benchmarks/bench_chunks.py --size tiny   # the demo site (no download)

Pages: the extracted texts of Debian's postgresql-doc-15 (15.20), python3.11-doc
(3.11.2-6+deb12u9) and sqlite3-doc (3.40.1), downloaded, unpacked and extracted under benchmarks/.cache/ when missing.
Each documentation set is one host.

1. Chunk size cap (``DEFAULT_CHUNK_WORDS``): for several caps, how many lines (paragraphs) are
   longer than the cap and must be cut at sentences, how many chunks fall under
   ``DEFAULT_MIN_TOKENS`` (exact-only), the characters per chunk (p50 / p99), and chunks/s.
2. Boilerplate thresholds (``DEFAULT_BOILERPLATE_SHARE`` / ``MIN_PAGES``): the document
   frequency of every paragraph as a share of its host's pages, binned, with the most frequent
   paragraphs, so that the gap between site furniture and repeated real content is visible.

Writes benchmarks/results/chunks.json (rows for run_all.py) and results/chunks.md (the tables).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _corpus  # noqa: E402
from run_all import fmt, log as _log, row, write_result  # noqa: E402

from scrapy_dedup.core.boilerplate import BoilerplateLearner, paragraph_key, paragraphs  # noqa: E402
from scrapy_dedup.core.chunks import DEFAULT_CHUNK_WORDS, chunk_text  # noqa: E402
from scrapy_dedup.core.fingerprints import DEFAULT_MIN_TOKENS  # noqa: E402
from scrapy_dedup.core.text import token_count  # noqa: E402

RESULTS = HERE / "results"
NAME = "chunks"
CAPS = (100, 150, 200, 300, 400)
SHARE_BINS = (0.0, 0.01, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 0.9, 1.0001)
SITES = {
    "postgresql-15.20": ("postgresql-doc-15=15.20-0+deb12u1", Path("usr/share/doc/postgresql-doc-15/html")),
    "python-3.11": ("python3.11-doc=3.11.2-6+deb12u9", Path("usr/share/doc/python3.11/html")),
    # about 40% of every page is navigation and footer that the extractor keeps
    "sqlite-3.40": ("sqlite3-doc=3.40.1-2+deb12u2", Path("usr/share/doc/sqlite3")),
}
DEMO = HERE.parent / "example_project" / "demo_site"


def log(message: str) -> None:
    _log(NAME, message)


def load(size: str) -> dict[str, dict[str, str]]:
    if size == "tiny":
        pages = [p for p in _corpus.html_pages(DEMO) if not p.startswith("_v2/")]
        return {"demo": _corpus.extracted_texts(DEMO, pages)}
    out = {}
    for site, (spec, html) in SITES.items():
        root = _corpus.package_dir(spec) / html
        out[site] = _corpus.extracted_texts(root, _corpus.html_pages(root))
    return out


def chunk_sizes(texts: list[str]) -> dict[str, object]:
    lines = [token_count(t[a:b]) for t in texts for a, b in paragraphs(t)]
    result: dict[str, object] = {"pages": len(texts), "lines": len(lines), "by_cap": {}}
    for cap in CAPS:
        start = time.perf_counter()
        chunks = [c for t in texts for c in chunk_text(t, max_words=cap)]
        elapsed = time.perf_counter() - start
        chars = np.array([len(c.text) for c in chunks])
        tokens = np.array([c.tokens for c in chunks])
        result["by_cap"][cap] = {
            "chunks": len(chunks),
            "chunks_per_page": round(len(chunks) / max(len(texts), 1), 2),
            "lines_over_cap": round(sum(n > cap for n in lines) / max(len(lines), 1), 4),
            "chunks_under_min_tokens": round(float((tokens < DEFAULT_MIN_TOKENS).mean()), 4) if len(chunks) else None,
            "tokens_p50": int(np.percentile(tokens, 50)) if len(chunks) else None,
            "chars_p50": int(np.percentile(chars, 50)) if len(chunks) else None,
            "chars_p99": int(np.percentile(chars, 99)) if len(chunks) else None,
            "chars_max": int(chars.max()) if len(chunks) else None,
            "chunks_per_s": round(len(chunks) / elapsed) if elapsed else None,
            "pages_per_s": round(len(texts) / elapsed) if elapsed else None,
        }
    return result


def document_frequency(site: str, texts: dict[str, str]) -> dict[str, object]:
    df: Counter[str] = Counter()
    sample: dict[str, str] = {}
    chars: Counter[str] = Counter()
    for text in texts.values():
        keys = set()
        for a, b in paragraphs(text):
            key = paragraph_key(text[a:b])
            if key:
                keys.add(key)
                sample.setdefault(key, text[a:b])
                chars[key] += b - a
        df.update(keys)
    pages = len(texts)
    shares = np.array([n / pages for n in df.values()])
    bins = {}
    for lo, hi in zip(SHARE_BINS, SHARE_BINS[1:]):
        mask = (shares >= lo) & (shares < hi) & (np.array(list(df.values())) >= 2)
        bins[f"{lo:.2f}-{min(hi, 1):.2f}"] = int(mask.sum())
    top = [
        {"share": round(n / pages, 3), "pages": n, "text": sample[k][:90]}
        for k, n in df.most_common(12)
    ]
    # the most frequent paragraph below each candidate share: what a lower share would also strip
    below = {}
    for share in (0.2, 0.35, 0.5):
        under = [(n, k) for k, n in df.items() if n / pages < share]
        if under:
            n, k = max(under)
            below[str(share)] = {"share": round(n / pages, 3), "text": sample[k][:90]}
    # small hosts: how much text min_pages alone would strip from a host of 4 pages (share 0.5
    # makes the threshold 2 there), over random 4-page samples of the site
    rng = np.random.default_rng(7)
    urls = sorted(texts)
    small = {}
    for min_pages in (2, 3):
        stripped = []
        for _ in range(200):
            sample = [urls[k] for k in rng.choice(len(urls), size=min(4, len(urls)), replace=False)]
            lrn = BoilerplateLearner(min_pages=min_pages)
            for url in sample:
                lrn.observe(site, url, texts[url])
            keys = lrn.boilerplate_keys(site)
            total = sum(len(texts[u]) for u in sample) or 1
            cut = sum(b - a for u in sample for a, b in paragraphs(texts[u]) if paragraph_key(texts[u][a:b]) in keys)
            stripped.append(cut / total)
        small[str(min_pages)] = round(float(np.mean(stripped)), 4)
    learner = BoilerplateLearner()
    for url, text in texts.items():
        learner.observe(site, url, text)
    learned = learner.boilerplate_keys(site)
    total_chars = sum(len(t) for t in texts.values())
    removed = sum(chars[k] for k in learned)
    return {
        "pages": pages,
        "paragraphs": len(df),
        "paragraphs_on_one_page": sum(1 for n in df.values() if n == 1),
        "share_bins (paragraphs on >= 2 pages)": bins,
        "most_frequent": top,
        "most_frequent_below": below,
        "four_page_hosts_share_of_chars_stripped_by_min_pages": small,
        "defaults": {"boilerplate_paragraphs": len(learned), "chars_removed": removed, "share_of_chars": round(removed / max(total_chars, 1), 4)},
    }


def markdown(report: dict) -> str:
    lines = ["# Chunks and boilerplate on real documentation", "", f"Generated {report['generated']} by benchmarks/bench_chunks.py (size {report['size']}).", ""]
    for site, res in report["sites"].items():
        cs = res["chunks"]
        lines += [f"## {site}: {cs['pages']} pages, {cs['lines']} lines", "",
                  "| cap (words) | chunks/page | lines over cap | chunks < 50 words | words p50 | chars p50 / p99 / max | chunks/s |",
                  "|---|---|---|---|---|---|---|"]
        for cap, r in cs["by_cap"].items():
            mark = " (default)" if int(cap) == DEFAULT_CHUNK_WORDS else ""
            lines.append(
                f"| {cap}{mark} | {r['chunks_per_page']} | {r['lines_over_cap']:.1%} | {r['chunks_under_min_tokens']:.1%} | "
                f"{r['tokens_p50']} | {r['chars_p50']} / {r['chars_p99']} / {r['chars_max']} | {r['chunks_per_s']:,} |"
            )
        bp = res["boilerplate"]
        lines += ["", f"Paragraphs: {bp['paragraphs']} distinct, {bp['paragraphs_on_one_page']} on one page only. "
                  "Paragraphs on two pages or more, by the share of the host's pages they are on:", "",
                  "| share of pages | " + " | ".join(bp["share_bins (paragraphs on >= 2 pages)"]) + " |",
                  "|---|" + "---|" * len(bp["share_bins (paragraphs on >= 2 pages)"]),
                  "| paragraphs | " + " | ".join(str(v) for v in bp["share_bins (paragraphs on >= 2 pages)"].values()) + " |", "",
                  "| share | pages | most frequent paragraphs |", "|---|---|---|"]
        lines += [f"| {t['share']} | {t['pages']} | {t['text']} |" for t in bp["most_frequent"]]
        lines += ["", "Most frequent paragraph under each share: "
                  + "; ".join(f"< {s}: {v['share']} \"{v['text']}\"" for s, v in bp["most_frequent_below"].items()), "",
                  "Hosts of 4 pages (random samples): share of their text stripped with min_pages = "
                  + ", ".join(f"{k}: {v:.1%}" for k, v in bp["four_page_hosts_share_of_chars_stripped_by_min_pages"].items()) + ".", "",
                  f"With the defaults: {bp['defaults']['boilerplate_paragraphs']} boilerplate paragraphs, "
                  f"{bp['defaults']['chars_removed']:,} characters ({bp['defaults']['share_of_chars']:.1%} of the text).", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", choices=("tiny", "default", "large"), default="default")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sites = load(args.size)
    report: dict[str, object] = {"generated": time.strftime("%Y-%m-%d %H:%M"), "size": args.size, "sites": {}}
    rows = []
    for site, texts in sites.items():
        log(f"{site}: {len(texts)} pages")
        res = {"chunks": chunk_sizes(list(texts.values())), "boilerplate": document_frequency(site, texts)}
        report["sites"][site] = res
        default = res["chunks"]["by_cap"][DEFAULT_CHUNK_WORDS]
        bp = res["boilerplate"]["defaults"]
        rows.append(row(NAME, f"{site}: chunks/s at the default cap ({DEFAULT_CHUNK_WORDS} words)", fmt(default["chunks_per_s"]),
                        "", "", "report"))
        rows.append(row(NAME, f"{site}: characters removed as boilerplate (defaults)", f"{bp['share_of_chars']:.1%}",
                        "", "", "report"))
    text = markdown(report)
    write_result(NAME, {"size": args.size, "results": report, "rows": rows, "notes": []}, args.out)
    (args.out / f"{NAME}.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
