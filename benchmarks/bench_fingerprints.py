"""Fingerprint throughput on real page texts (the PostgreSQL 15 docs, main text as extracted).

    .venv/bin/python benchmarks/bench_fingerprints.py [--size tiny|default|large] [--docs N]

Three SimHash implementations on the SAME texts, one after the other, best of ``--passes``:

- ``scrapy_dedup.simhash`` (vectorised: xxh3 per token, word 3-shingles, numpy bit counts);
- ``trafilatura.deduplication.Simhash``: what a Scrapy + trafilatura user already has
  (per token a cached blake2b vector, Python list arithmetic). Best of the passes, so its
  token cache is warm: the comparison favours it;
- a plain-Python reference written the way this field's articles write it: word 3-shingles,
  per feature a blake2b hash and a 64-step bit loop.

Documents per second and MB (UTF-8 bytes of text) per second; the ratios are scrapy-dedup's
figure over the other's. Also the exact hash (``content_hash``: canonicalisation + xxh3-128)
in MB/s and the full ``fingerprint()`` (exact + SimHash + MinHash) in documents/s, over all texts.
Writes results/fingerprints.json.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _corpus  # noqa: E402
from run_all import RESULTS, SIZES, fmt, log, row, write_result  # noqa: E402

from scrapy_dedup.core.fingerprints import content_hash, fingerprint, simhash  # noqa: E402

NAME = "fingerprints"
#: documents compared across the three SimHash implementations (the slow ones set the size)
DOCS = {"tiny": 12, "default": 240, "large": 1200}
PASSES = {"tiny": 1, "default": 3, "large": 3}
#: pages read for the all-texts figures (exact hash, full fingerprint); None = every page
ALL_PAGES = {"tiny": 12, "default": None, "large": None}
TARGET_TRAFILATURA, TARGET_REFERENCE = 5.0, 15.0

_WORD = re.compile(r"\w+")


def reference_simhash(text: str, shingle: int = 3) -> int:
    """SimHash as the tutorials write it: per feature a blake2b hash and a 64-step bit loop."""
    words = _WORD.findall(text.lower())
    features = [" ".join(words[i : i + shingle]) for i in range(max(1, len(words) - shingle + 1))]
    vector = [0] * 64
    for feature in features:
        h = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "big")
        for i in range(64):
            if h >> i & 1:
                vector[i] += 1
            else:
                vector[i] -= 1
    return sum(1 << i for i in range(64) if vector[i] > 0)


def trafilatura_simhash() -> Callable[[str], int] | None:
    try:
        from trafilatura.deduplication import Simhash
    except ImportError:
        return None
    return lambda text: Simhash(text).hash


def best_time(fn: Callable[[str], object], texts: list[str], passes: int) -> float:
    best = float("inf")
    for _ in range(passes):
        start = time.perf_counter()
        for text in texts:
            fn(text)
        best = min(best, time.perf_counter() - start)
    return best


def load_texts(size: str) -> tuple[list[str], str]:
    release = "15.20"
    root = _corpus.docs_root()
    pages = _corpus.html_pages(root)
    limit = ALL_PAGES[size]
    if limit is not None:
        pages = pages[:: max(1, len(pages) // limit)][:limit]
    texts = _corpus.extracted_texts(root, pages)
    label = root.name if os.environ.get(_corpus.PAGES_ENV) else f"postgresql-doc-{release}"
    return [texts[p] for p in pages if texts[p].strip()], label


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--docs", type=int, help="documents in the three-way comparison (default by size)")
    parser.add_argument("--passes", type=int, help="timed passes, best kept (default by size)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    n_docs = args.docs or DOCS[args.size]
    passes = args.passes or PASSES[args.size]

    texts, corpus = load_texts(args.size)
    # an even spread over the corpus, so short and long pages are both represented
    step = max(1, len(texts) // n_docs)
    sample = texts[::step][:n_docs]
    mb_sample = sum(len(t.encode("utf-8")) for t in sample) / 1e6
    mb_all = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    log(NAME, f"{len(sample)} of {len(texts)} texts ({mb_sample:.2f} of {mb_all:.2f} MB), best of {passes}")

    impls: dict[str, Callable[[str], int]] = {"scrapy_dedup": simhash, "reference": reference_simhash}
    traf = trafilatura_simhash()
    if traf is not None:
        impls["trafilatura"] = traf
    seconds = {}
    for name, fn in impls.items():
        seconds[name] = best_time(fn, sample, passes)
        log(NAME, f"{name}: {seconds[name]:.3f} s")
    simhash_rates = {
        name: {"docs_per_s": len(sample) / s, "mb_per_s": mb_sample / s, "seconds": s} for name, s in seconds.items()
    }
    exact_s = best_time(content_hash, texts, passes)
    full_s = best_time(fingerprint, texts, passes)
    simhash_all_s = best_time(simhash, texts, passes)
    results = {
        "corpus": corpus,
        "docs_compared": len(sample),
        "mb_compared": mb_sample,
        "docs_all": len(texts),
        "mb_all": mb_all,
        "passes": passes,
        "simhash": simhash_rates,
        "ratio_vs_trafilatura": seconds["trafilatura"] / seconds["scrapy_dedup"] if traf else None,
        "ratio_vs_reference": seconds["reference"] / seconds["scrapy_dedup"],
        "simhash_all": {"docs_per_s": len(texts) / simhash_all_s, "mb_per_s": mb_all / simhash_all_s},
        "exact_hash": {"mb_per_s": mb_all / exact_s, "docs_per_s": len(texts) / exact_s},
        "fingerprint_all": {"docs_per_s": len(texts) / full_s, "mb_per_s": mb_all / full_s},
    }
    ours = simhash_rates["scrapy_dedup"]
    ref = simhash_rates["reference"]
    r_ref = results["ratio_vs_reference"]
    rows = []
    for unit, key in (("documents/s", "docs_per_s"), ("MB/s", "mb_per_s")):
        if traf is not None:
            t = simhash_rates["trafilatura"]
            r_t = results["ratio_vs_trafilatura"]
            rows.append(row(NAME, f"SimHash {unit} vs trafilatura Simhash", fmt(ours[key]), f"trafilatura {fmt(t[key])}",
                            f"{r_t:.1f}x", f">= {TARGET_TRAFILATURA:g}x", r_t >= TARGET_TRAFILATURA))
        rows.append(row(NAME, f"SimHash {unit} vs plain-Python reference", fmt(ours[key]), f"reference {fmt(ref[key])}",
                        f"{r_ref:.1f}x", f">= {TARGET_REFERENCE:g}x", r_ref >= TARGET_REFERENCE))
    rows.append(row(NAME, "exact hash (canonicalise + xxh3-128) MB/s", fmt(results["exact_hash"]["mb_per_s"]), "", "", "report"))
    rows.append(row(NAME, "fingerprint() (exact + SimHash + MinHash) documents/s",
                    fmt(results["fingerprint_all"]["docs_per_s"]), "", "", "report"))
    notes = [
        f"{len(sample)} page texts of {corpus} ({mb_sample:.2f} MB) for the three-way SimHash comparison, "
        f"best of {passes} passes each; exact hash and fingerprint() over all {len(texts)} texts ({mb_all:.1f} MB)."
    ]
    if traf is None:
        notes.append("trafilatura is not importable: its comparison was skipped")
    write_result(NAME, {"size": args.size, "results": results, "rows": rows, "notes": notes}, args.out)
    for r in rows:
        print(f"{r['measure']}: {r['scrapy_dedup']} | {r['alternatives']} | {r['ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
