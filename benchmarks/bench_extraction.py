"""Extraction that keeps the text, and no merge of distinct documents, on sites nobody tuned to.

    .venv/bin/python benchmarks/bench_extraction.py                 # 60 pages a site, ~3 min on 2 cores
    .venv/bin/python benchmarks/bench_extraction.py --size tiny     # the demo site: keeps the script working

Sites (Debian documentation packages, downloaded and unpacked under benchmarks/.cache/ when
missing, see _corpus.py): a Publican/DocBook book in English, Japanese (CJK) and Arabic
(right to left), Sphinx docs, javadoc, Doxygen; and the same book in all its 26 languages
(a few pages each: partial translations and untranslated copies).

Per site, on a fixed sample of pages, in one process, the three extractions interleaved page by
page, each first on a third of the pages (CPU time):
- **fast**: trafilatura's fast mode, what extraction version 1 shipped;
- **full**: trafilatura's full mode (with the readability/jusText fallback): the reference text;
- **shipped**: ``extract_text`` (the full mode for pages of three or more paragraphs written as
  ``<div>``, the fast mode otherwise).

*Kept* is the share of the full-mode text's word 5-shingles that a text has. Pairs are judged by
J, the word 5-shingle Jaccard of the two full-mode texts, words as the project's near-duplicate
Jaccard takes them (``\\w+`` runs, each character of a script without spaces one word) after NFKC
and casefold. A pair is *merged* when the two texts have the same content hash or near_match accepts
them: before, on the fast texts by the MinHash estimate (version 1, texts not compared, every
pair a candidate); after, on the shipped texts with the texts compared (DEDUP_KEEP_TEXT, the
default), and only when the pair is a candidate as in a crawl: the same content hash, SimHash
within DEDUP_MAX_DISTANCE bits, or a MinHash LSH band in common.

Writes benchmarks/results/extraction.json and extraction.md.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _corpus  # noqa: E402
import trafilatura  # noqa: E402
from run_all import row, write_result  # noqa: E402

from scrapy_dedup.core import fingerprints as F  # noqa: E402
from scrapy_dedup.core.bands import band_hashes  # noqa: E402
from scrapy_dedup.core.language import translated  # noqa: E402
from scrapy_dedup.core.text import _WORD_RE  # noqa: E402
from scrapy_dedup.extraction.main_text import EXTRACT_PARAMS, _decode, extract_text  # noqa: E402

RESULTS = HERE / "results"
HANDBOOK = "debian-handbook=11.20220922"
HANDBOOK_HTML = Path("usr/share/doc/debian-handbook/html")
#: name -> (package spec, directory of its pages, kind)
SITES = {
    "handbook en-US": (HANDBOOK, HANDBOOK_HTML / "en-US", "Publican/DocBook"),
    "handbook ja-JP": (HANDBOOK, HANDBOOK_HTML / "ja-JP", "Publican/DocBook, CJK"),
    "handbook ar-MA": (HANDBOOK, HANDBOOK_HTML / "ar-MA", "Publican/DocBook, right to left"),
    "sphinx-doc": ("sphinx-doc=5.3.0-4", Path("usr/share/doc/sphinx-doc/html"), "Sphinx"),
    "commons-lang3 javadoc": (
        "libcommons-lang3-java-doc=3.12.0-2+deb12u1", Path("usr/share/doc/libcommons-lang3-java/api"), "javadoc",
    ),
    "clipper doxygen": ("libclipper-doc=2.1.20201109-1", Path("usr/share/doc/libclipper-dev/html"), "Doxygen"),
}
PAGES = {"tiny": 8, "default": 60}
#: pages of the book taken in every language, for the multilingual site
MULTILINGUAL_PAGES = {"tiny": 2, "default": 6}
SEED = 35
CLASSES = (("J>=0.9", 0.9, 2.0), ("0.8<=J<0.9", 0.8, 0.9), ("0.5<=J<0.8", 0.5, 0.8), ("J<0.5", -1.0, 0.5))
TARGETS = {"J>=0.9": ">= 0.99 found", "0.8<=J<0.9": ">= 0.90 found", "0.5<=J<0.8": "<= 0.10 merged", "J<0.5": "<= 0.0005 merged"}
_WORDS = _WORD_RE  # the words of the Jaccard a near duplicate is defined by
_OPTIONS = dict(deduplicate=False, output_format="txt", include_tables=True, with_metadata=False,
                include_images=False, include_links=False, include_formatting=False)


def log(message: str) -> None:
    print(f"[extraction] {message}", file=sys.stderr, flush=True)


def shingles(text: str) -> set[int]:
    words = _WORDS.findall(unicodedata.normalize("NFKC", text).casefold())
    if not words:
        return set()
    return {hash(tuple(words[i : i + 5])) for i in range(max(1, len(words) - 4))}


def jaccard(a: set[int], b: set[int]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def extract_three(paths: list[Path]) -> dict[str, object]:
    """fast, full and shipped text of each page, and the CPU time of each (interleaved)."""
    texts: dict[str, list[str]] = {"fast": [], "full": [], "shipped": []}
    cpu = dict.fromkeys(texts, 0.0)
    modes = ("fast", "full", "shipped")
    for n, path in enumerate(paths):
        html = _decode(path.read_bytes())
        for mode in modes[n % 3 :] + modes[: n % 3]:  # each goes first on a third of the pages
            t0 = time.process_time()
            if mode == "shipped":
                text = extract_text(html)
            else:
                text = trafilatura.extract(html, fast=mode == "fast", **_OPTIONS) or ""
            cpu[mode] += time.process_time() - t0
            texts[mode].append(text)
    return {"texts": texts, "ms_per_page": {m: round(1000 * t / max(1, len(paths)), 2) for m, t in cpu.items()}}


def kept_shares(texts: list[str], full: list[str]) -> list[float | None]:
    out: list[float | None] = []
    for text, reference in zip(texts, full):
        ref = shingles(reference)
        out.append(len(ref & shingles(text)) / len(ref) if ref else None)
    return out


def words_kept(texts: list[str], full: list[str]) -> list[float | None]:
    """Share of the full-mode text's words (counted with repeats) that a text has, in any
    order: a text that reads more of the page than the full mode, in another order, keeps
    every word while its 5-shingles differ."""
    out: list[float | None] = []
    for text, reference in zip(texts, full):
        ref = Counter(_WORDS.findall(unicodedata.normalize("NFKC", reference).casefold()))
        have = Counter(_WORDS.findall(unicodedata.normalize("NFKC", text).casefold()))
        total = sum(ref.values())
        out.append(sum((ref & have).values()) / total if total else None)
    return out


def merged(fa: F.Fingerprint, fb: F.Fingerprint, texts: tuple[str, str] | None) -> bool:
    if fa.tokens == 0 or fb.tokens == 0:
        return False  # a page without text is no document
    if fa.content_hash == fb.content_hash:
        return True
    return F.near_match(fa, fb, texts=texts)[0]


def bands(fp: F.Fingerprint) -> set[int]:
    return set(band_hashes(fp.minhash)) if fp.minhash else set()


def candidate(fa: F.Fingerprint, fb: F.Fingerprint, ba: set[int], bb: set[int]) -> bool:
    """Whether a crawl's content index would look at the pair (the exact index, the SimHash
    tables, the LSH bands)."""
    return (fa.content_hash == fb.content_hash or F.hamming(fa.simhash, fb.simhash) <= F.DEFAULT_MAX_DISTANCE
            or bool(ba & bb))


def pair_figures(full: list[str], before: list[str], after: list[str], names: list[str]) -> dict[str, object]:
    sets = [shingles(t) for t in full]
    fps_before = [F.fingerprint(t) for t in before]
    fps_after = [F.fingerprint(t) for t in after]
    bands_after = [bands(fp) for fp in fps_after]
    rows = {name: {"pairs": 0, "before": 0, "after": 0, "candidates": 0} for name, *_ in CLASSES}
    # the confirmation of a candidate (estimate >= 0.5): by the estimate, and by the texts (CPU time)
    timed = {"candidates": 0, "estimate_s": 0.0, "texts_s": 0.0}
    examples: list[dict[str, object]] = []
    missed: list[dict[str, object]] = []
    for i, j in itertools.combinations(range(len(full)), 2):
        if not sets[i] or not sets[j]:
            continue
        jac = jaccard(sets[i], sets[j])
        cls = next(name for name, lo, hi in CLASSES if lo <= jac < hi)
        rows[cls]["pairs"] += 1
        rows[cls]["before"] += merged(fps_before[i], fps_before[j], None)
        fa, fb = fps_after[i], fps_after[j]
        if F.jaccard_estimate(fa.minhash, fb.minhash) >= 0.5:
            t0 = time.process_time()
            F.near_match(fa, fb)
            t1 = time.process_time()
            F.near_match(fa, fb, texts=(after[i], after[j]))
            t2 = time.process_time()
            timed["candidates"] += 1
            timed["estimate_s"] += t1 - t0
            timed["texts_s"] += t2 - t1
        found = candidate(fa, fb, bands_after[i], bands_after[j])
        rows[cls]["candidates"] += found
        now = found and merged(fa, fb, (after[i], after[j]))
        rows[cls]["after"] += now
        if now and jac < 0.5 and len(examples) < 5:
            examples.append({"a": names[i], "b": names[j], "J": round(jac, 3)})
        if not now and jac >= 0.8 and len(missed) < 40:
            missed.append({"a": names[i], "b": names[j], "J": round(jac, 3), "candidate": found,
                           "J_shipped_text": round(F.shingle_jaccard(after[i], after[j]), 3),
                           "translated": translated(after[i], after[j])})
    for counts in rows.values():
        n = counts["pairs"]
        counts["before_rate"] = round(counts["before"] / n, 4) if n else None
        counts["after_rate"] = round(counts["after"] / n, 4) if n else None
    n = timed["candidates"]
    return {
        "classes": rows,
        "merged_under_0.5_after": examples,
        "not_merged_J_0.8_up_after": missed,
        "confirmations": {
            "candidates (estimate >= 0.5)": n,
            "ms_by_estimate": round(1000 * timed["estimate_s"] / n, 3) if n else None,
            "ms_by_texts": round(1000 * timed["texts_s"] / n, 3) if n else None,
        },
    }


def edited_figures(texts: list[str]) -> dict[str, object]:
    """Each page against a copy of it with random word edits (quality.py's edits: scattered
    substitutions, insertions and deletions, or one block replaced, inserted or deleted, with
    words of the site): the near-duplicate rule on the site's own words and scripts, where the
    sample holds few near pairs of its own. J is taken on the shipped texts; each pair is
    decided, when it is a candidate, by the MinHash estimate alone and with the texts compared."""
    import numpy as np
    from quality import _edit

    rng = np.random.default_rng(SEED)
    vocab = " ".join(texts[::3]).split() or ["word"]
    rows = {name: {"pairs": 0, "estimate": 0, "texts": 0} for name, *_ in CLASSES}
    for n, text in enumerate(texts):
        words = text.split()
        if F.fingerprint(text).tokens < F.DEFAULT_MIN_TOKENS or not words:
            continue
        copy = " ".join(_edit(words, "scattered" if n % 2 else "block", vocab, rng))
        jac = jaccard(shingles(text), shingles(copy))
        cls = next(name for name, lo, hi in CLASSES if lo <= jac < hi)
        a, b = F.fingerprint(text), F.fingerprint(copy)
        found = candidate(a, b, bands(a), bands(b))
        rows[cls]["pairs"] += 1
        rows[cls]["estimate"] += found and merged(a, b, None)
        rows[cls]["texts"] += found and merged(a, b, (text, copy))
    return rows


def summarize(name: str, kind: str, version: str, names: list[str], extracted: dict[str, object]) -> dict[str, object]:
    texts = extracted["texts"]
    full = texts["full"]
    kept = {mode: kept_shares(texts[mode], full) for mode in ("fast", "shipped")}
    words = {mode: words_kept(texts[mode], full) for mode in ("fast", "shipped")}
    with_text = [k for k in kept["shipped"] if k is not None]
    ms = extracted["ms_per_page"]
    result = {
        "site": name,
        "kind": kind,
        "package": version,
        "pages": len(names),
        "pages_with_full_text": len(with_text),
        "ms_per_page": ms,
        "cpu_vs_fast": {m: round(ms[m] / ms["fast"], 3) if ms["fast"] else None for m in ("full", "shipped")},
        "kept": {},
        "full_mode_used": sum(s != f for s, f in zip(texts["shipped"], texts["fast"])),
    }
    for mode, shares in kept.items():
        values = [k for k in shares if k is not None]
        result["kept"][mode] = {
            "under_0.9": sum(k < 0.9 for k in values),
            "under_0.8_of_text": sum(k < 0.8 for k in values),
            "min": round(min(values), 3) if values else None,
            "mean": round(sum(values) / len(values), 3) if values else None,
            "pages_under_0.9": [n for n, k in zip(names, shares) if k is not None and k < 0.9][:8],
            "words_under_0.9": sum(k < 0.9 for k in words[mode] if k is not None),
            "words_min": min((round(k, 3) for k in words[mode] if k is not None), default=None),
        }
    result["pairs"] = pair_figures(full, texts["fast"], texts["shipped"], names)
    result["edited_copies"] = edited_figures(texts["shipped"])
    return result


def sample(root: Path, count: int) -> list[str]:
    pages = _corpus.html_pages(root)
    random.Random(SEED).shuffle(pages)
    return sorted(pages[:count])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", choices=("tiny", "default", "large"), default="default")
    parser.add_argument("--pages", type=int, default=0, help="pages a site (default: 60; tiny: 8)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    size = "tiny" if args.size == "tiny" else "default"
    count = args.pages or PAGES[size]
    started = time.perf_counter()
    sites: list[dict[str, object]] = []
    if size == "tiny":
        root = _corpus.TINY_PAGES if hasattr(_corpus, "TINY_PAGES") else HERE.parent / "example_project" / "demo_site"
        names = sample(root, count)
        sites.append(summarize("demo site", "the project's demo pages", "-", names, extract_three([root / n for n in names])))
    else:
        for name, (spec, sub, kind) in SITES.items():
            root = _corpus.package_dir(spec) / sub
            names = sample(root, count)
            log(f"{name}: {len(names)} pages of {spec}")
            sites.append(summarize(name, kind, spec, names, extract_three([root / n for n in names])))
        book = _corpus.package_dir(HANDBOOK) / HANDBOOK_HTML
        languages = sorted(p.name for p in book.iterdir() if p.is_dir())
        pages = sample(book / "en-US", MULTILINGUAL_PAGES[size])
        names = [f"{lang}/{page}" for page in pages for lang in languages if (book / lang / page).exists()]
        log(f"handbook, {len(languages)} languages: {len(names)} pages")
        sites.append(
            summarize("handbook, 26 languages", "multilingual Publican book", HANDBOOK, names,
                      extract_three([book / n for n in names]))
        )
    shipped = [s["cpu_vs_fast"]["shipped"] for s in sites if s["cpu_vs_fast"]["shipped"]]
    full = [s["cpu_vs_fast"]["full"] for s in sites if s["cpu_vs_fast"]["full"]]
    report = {
        "size": size,
        "pages_per_site": count,
        "extract_params": EXTRACT_PARAMS,
        "cpu_vs_fast_mean_over_sites": {
            "shipped": round(sum(shipped) / len(shipped), 3) if shipped else None,
            "full": round(sum(full) / len(full), 3) if full else None,
        },
        "sites": sites,
        "runtime_seconds": round(time.perf_counter() - started, 1),
    }
    report["rows"] = rows(report)
    write_result("extraction", report, args.out)
    text = markdown(report)
    (args.out / "extraction.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


def rows(report: dict[str, object]) -> list[dict[str, object]]:
    """The lines of the run_all table: text kept and CPU, merges under J 0.5."""
    sites = report["sites"]
    cut = sum(s["kept"]["shipped"]["under_0.9"] for s in sites)
    cut_fast = sum(s["kept"]["fast"]["under_0.9"] for s in sites)
    cut_words = sum(s["kept"]["shipped"]["words_under_0.9"] for s in sites)
    cut_words_fast = sum(s["kept"]["fast"]["words_under_0.9"] for s in sites)
    pages = sum(s["pages_with_full_text"] for s in sites)
    mean = report["cpu_vs_fast_mean_over_sites"]["shipped"]
    low = sum(s["pairs"]["classes"]["J<0.5"]["after"] for s in sites)
    low_pairs = sum(s["pairs"]["classes"]["J<0.5"]["pairs"] for s in sites)
    low_before = sum(s["pairs"]["classes"]["J<0.5"]["before"] for s in sites)
    return [
        row("extraction", f"pages keeping < 0.9 of the full-mode text's words ({len(sites)} sites)",
            f"{cut_words} of {pages}", f"fast mode {cut_words_fast}", target="0", met=cut_words == 0),
        row("extraction", "pages keeping < 0.9 of the full-mode text's 5-shingles (in order)", f"{cut} of {pages}",
            f"fast mode {cut_fast}"),
        row("extraction", "CPU per page vs fast mode, mean over the sites", f"{mean}x",
            f"full mode {report['cpu_vs_fast_mean_over_sites']['full']}x", target="<= 1.15x",
            met=mean is not None and mean <= 1.15),
        row("extraction", "pairs under J 0.5 merged, all sites", f"{low} of {low_pairs}", f"before: {low_before}",
            target="<= 0.05%", met=low_pairs > 0 and low / low_pairs <= 0.0005),
    ]


def markdown(report: dict[str, object]) -> str:
    mean = report["cpu_vs_fast_mean_over_sites"]
    lines = [
        "# Extraction: text kept and merges on sites nobody tuned to",
        "",
        f"{report['pages_per_site']} pages a site (the multilingual site: a few pages in every language), "
        "one process, CPU time. Kept: share of the full-mode text's words a text has (counted with "
        "repeats, in any order), and of its word 5-shingles (in order).",
        "",
        "| site | package | pages | fast: pages kept < 0.9, min (words; shingles) | shipped: pages kept < 0.9, min (words; shingles) | full mode run | ms/page fast / full / shipped | shipped vs fast |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in report["sites"]:
        k, ms = s["kept"], s["ms_per_page"]
        lines.append(
            f"| {s['site']} ({s['kind']}) | {s['package']} | {s['pages']} | "
            f"{k['fast']['words_under_0.9']}, {k['fast']['words_min']}; {k['fast']['under_0.9']}, {k['fast']['min']} | "
            f"{k['shipped']['words_under_0.9']}, {k['shipped']['words_min']}; {k['shipped']['under_0.9']}, {k['shipped']['min']} | "
            f"{s['full_mode_used']} | "
            f"{ms['fast']} / {ms['full']} / {ms['shipped']} | {s['cpu_vs_fast']['shipped']}x |"
        )
    lines += ["", f"CPU against the fast mode, mean over the sites: shipped {mean['shipped']}x, full mode {mean['full']}x "
              "(target for the shipped extraction: <= 1.15x).", "",
              "## Pairs (J on full-mode text): merged before (fast text, MinHash estimate, every pair) / after (shipped text, candidates only, texts compared)", "",
              "| site | " + " | ".join(f"{c} ({TARGETS[c]})" for c, *_ in CLASSES) + " | ms per confirmation, estimate / texts |",
              "|---|" + "---|" * (len(CLASSES) + 1)]
    for s in report["sites"]:
        rows = s["pairs"]["classes"]
        cells = " | ".join(
            f"{rows[c]['before']} / {rows[c]['after']} of {rows[c]['pairs']}" for c, *_ in CLASSES
        )
        c = s["pairs"]["confirmations"]
        lines.append(f"| {s['site']} | {cells} | {c['ms_by_estimate']} / {c['ms_by_texts']} ({c['candidates (estimate >= 0.5)']}) |")
    lines += ["", "Candidates (exact hash, SimHash within 3 bits or a shared LSH band) among the pairs, after: "
              + "; ".join(f"{s['site']}: " + ", ".join(f"{c} {s['pairs']['classes'][c]['candidates']}/{s['pairs']['classes'][c]['pairs']}"
                                                      for c, *_ in CLASSES[:3]) for s in report["sites"]) + ".", ""]
    lines += ["", "## Edited copies: each page against a copy with random word edits (J on the shipped texts)", "",
              "Found for J >= 0.8, merged below, candidates only: by the MinHash estimate alone / with the texts compared.", "",
              "| site | " + " | ".join(f"{c} ({TARGETS[c]})" for c, *_ in CLASSES) + " |",
              "|---|" + "---|" * len(CLASSES)]
    for s in report["sites"]:
        rows = s["edited_copies"]
        cells = " | ".join(f"{rows[c]['estimate']} / {rows[c]['texts']} of {rows[c]['pairs']}" for c, *_ in CLASSES)
        lines.append(f"| {s['site']} | {cells} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
