"""Near-duplicate quality on code-heavy API documentation, under several definitions of a word.

    .venv/bin/python benchmarks/quality_code.py            # about 5 min on 2 cores the first time
    .venv/bin/python benchmarks/quality_code.py --size small
    .venv/bin/python benchmarks/quality_code.py --size tiny --out DIR   # the demo site's pages

``--size tiny`` (what the tests run) takes the demo site's pages twice, as two releases: it keeps
the script working, and its figures say nothing about quality.

Corpus (Debian doc packages, downloaded and unpacked under benchmarks/.cache/ when missing):
- python3.11-doc, two releases (3.11.2-6+deb12u8 and +deb12u9): the library reference is full of
  signatures (``os.path.join(path, *paths)``), and pages of one release pair with the next;
- rust-doc 1.63: every page of ``std`` and the page at the same path under ``core`` or ``alloc``
  when there is one. ``std::iter::Chain`` and ``core::iter::Chain`` document one type from two
  crates: the same prose, every path in the signatures different;
- EDITED_COPIES edited copies of those pages (as in quality.py), so that the 0.8..0.9 class is
  not empty.

Ground truth is the exact Jaccard of word 5-shingles, for every pair of pages, computed three
times, once per definition of a word: ``\\w+`` runs after NFKC and casefold (punctuation dropped),
``\\w+`` runs and punctuation marks as tokens of their own, and whitespace-separated runs with
their punctuation attached. The decision is taken the way a crawl takes it (SimHash block and
MinHash band candidates, confirmed by ``near_match``) with the fingerprints computed from each
tokenizer, so the table shows which tokenizer holds the targets whichever definition one takes.

Writes benchmarks/results/quality_code.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _corpus  # noqa: E402
import quality as Q  # noqa: E402

from scrapy_dedup.core import bands as B, fingerprints as F  # noqa: E402
from scrapy_dedup.core.text import canonical_text  # noqa: E402

RESULTS = HERE / "results"
PYTHON_RELEASES = {"3.11.2-deb12u8": "python3.11-doc=3.11.2-6+deb12u8", "3.11.2-deb12u9": "python3.11-doc=3.11.2-6+deb12u9"}
PYTHON_HTML = Path("usr/share/doc/python3.11/html")
RUST_SPEC = "rust-doc=1.63.0+dfsg1-2"
RUST_HTML = Path("usr/share/doc/rust-doc/html")
EDITED_COPIES = {"full": 800, "small": 150, "tiny": 20}
# std modules measured: those re-exported from core (twins) and some std-only ones (io, fs,
# path: code-heavy pages without a twin), plus with "full" the top-level pages (primitive types,
# macros). The 17,000 pages of std::arch intrinsics are left out: extraction would take an hour.
_TWIN_MODULES = ("iter", "ops", "str", "slice", "ptr", "mem", "fmt", "cmp", "num", "char", "marker",
                 "option", "result", "convert", "cell", "hash", "any", "borrow", "clone", "default")
RUST_MODULES = {
    "full": tuple(f"std/{m}/" for m in _TWIN_MODULES + ("io", "fs", "path", "env", "process", "thread", "vec", "string")),
    "small": ("std/iter/", "std/vec/", "std/string/", "std/option/"),
}
SEED = 20261201

# The word definitions ground truth is computed with. "words" is the one the project's targets
# are stated in.
_WORDS = re.compile(r"\w+")
_WORDS_AND_MARKS = re.compile(r"\w+|[^\w\s]")
DEFINITIONS = {
    "words": lambda canonical: _WORDS.findall(canonical),
    "words+marks": lambda canonical: _WORDS_AND_MARKS.findall(canonical),
    "attached": lambda canonical: canonical.split(),
}


def log(message: str) -> None:
    print(f"[quality_code] {message}", file=sys.stderr, flush=True)


def load_pages(size: str) -> tuple[list[str], list[str]]:
    names, texts = [], []
    if size == "tiny":
        for release, pages in Q.tiny_releases().items():
            names += [f"demo-{release}/{page}" for page in pages]
            texts += list(pages.values())
        return names, texts
    for release, spec in PYTHON_RELEASES.items():
        root = _corpus.package_dir(spec) / PYTHON_HTML
        pages = [p for p in _corpus.html_pages(root) if size == "full" or p.startswith("library/")]
        for page, text in _corpus.extracted_texts(root, pages).items():
            names.append(f"python-{release}/{page}")
            texts.append(text)
    root = _corpus.package_dir(RUST_SPEC) / RUST_HTML
    modules = RUST_MODULES[size]
    std = [p for p in _corpus.html_pages(root) if p.startswith(modules) or (size == "full" and p.count("/") == 1 and p.startswith("std/"))]
    twins = [f"{crate}/{p[4:]}" for p in std for crate in ("core", "alloc") if (root / crate / p[4:]).is_file()]
    for page, text in _corpus.extracted_texts(root, std + twins).items():
        names.append(f"rust/{page}")
        texts.append(text)
    return names, texts


def edited_copies(names: list[str], texts: list[str], count: int) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(SEED)
    vocab = " ".join(texts[::7]).split()
    long_enough = [k for k, t in enumerate(texts) if len(t.split()) >= 2 * F.DEFAULT_MIN_TOKENS]
    picked = sorted(rng.choice(long_enough, size=min(count, len(long_enough)), replace=False).tolist())
    out_names, out_texts = [], []
    for n, k in enumerate(picked):
        kind = "scattered" if n % 2 else "block"
        out_names.append(f"edited/{kind}/{names[k]}")
        out_texts.append(" ".join(Q._edit(texts[k].split(), kind, vocab, rng)))
    return out_names, out_texts


def token_hashes(texts: list[str], definition: str) -> list[np.ndarray]:
    split = DEFINITIONS[definition]
    out = []
    for text in texts:
        canonical = canonical_text(text)
        out.append(F._token_hashes([t.encode("utf-8") for t in split(canonical)]))
    return out


def ground_truth(names, texts, edited, hashes, eligible) -> Q.Pairs:
    i, j, jac = Q.exact_jaccard(Q.shingle_sets(hashes))
    keep = eligible[i] & eligible[j]
    i, j, jac = i[keep], j[keep], jac[keep]
    canon = np.array([F.content_hash(t) for t in texts])
    group = np.where(edited[i] | edited[j], "edited", "real")
    real = int((eligible & ~edited).sum())
    every = int(eligible.sum())
    totals = {"real": real * (real - 1) // 2, "edited": every * (every - 1) // 2 - real * (real - 1) // 2}
    return Q.Pairs(i, j, jac, canon[i] == canon[j], group, eligible, edited, len(texts), totals)


def fingerprints(texts: list[str], hashes: list[np.ndarray]) -> list[F.Fingerprint]:
    """Fingerprints as fingerprint() makes them, from the given token hashes."""
    fps = []
    for text, h in zip(texts, hashes):
        sim = F._simhash_features(F._shingle_hashes(h, F.SIMHASH_SHINGLE))
        sig = F._stored(F._minhash_signature(F._shingle_hashes(h, F.MINHASH_SHINGLE), F._PERM_A, F._PERM_B))
        fps.append(F.Fingerprint(F.content_hash(text), sim, sig, len(h), len(text)))
    return fps


def decide(fps: list[F.Fingerprint], eligible: np.ndarray, texts: list[str] | None = None) -> np.ndarray:
    """Pair codes the crawl's decision flags: candidates from either index, confirmed by near_match
    (with ``texts``, borderline pairs are checked on their exact Jaccard, as when texts are kept)."""
    n = len(fps)
    sims = np.array([fp.simhash for fp in fps], dtype=np.uint64)
    blocks = (((t, blk), d) for d, fp in enumerate(fps) if eligible[d] for t, blk in enumerate(B.simhash_blocks(fp.simhash)))
    raw = Q._bucket_pairs(blocks, n)
    near = raw[Q.popcount(sims[raw // n] ^ sims[raw % n]) <= F.DEFAULT_MAX_DISTANCE]
    bands = (((b, h), d) for d, fp in enumerate(fps) if eligible[d] for b, h in enumerate(B.band_hashes(fp.minhash)))
    union = np.union1d(near, Q._bucket_pairs(bands, n))
    # near_match's own token floor uses fp.tokens of each tokenizer; eligibility (below) is the
    # same for every row so that the rows are comparable
    def pair_texts(c: int) -> tuple[str, str] | None:
        return (texts[c // n], texts[c % n]) if texts is not None else None

    ok = [c for c in union if F.near_match(fps[c // n], fps[c % n], min_tokens=0, texts=pair_texts(c))[0]]
    return np.array(ok, dtype=np.int64)


def rates(pairs: Q.Pairs, flagged: np.ndarray) -> dict[str, dict[str, object]]:
    result = Q.evaluate(pairs, flagged, {}, 1)
    out = {}
    for group in Q.GROUPS:
        out[group] = {name: {"found": r["found"], "pairs": r["pairs"], "rate": r["rate"]} for name, r in result[group].items()}
    return out


def shipped_tokens(texts: list[str]) -> list[np.ndarray]:
    return [F._token_hashes(F._token_bytes(t)) for t in texts]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", choices=sorted(EDITED_COPIES), default="full")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where quality_code.json and .md go")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    log("loading pages (downloads and extracts on the first run)")
    names, texts = load_pages(args.size)
    extra_names, extra_texts = edited_copies(names, texts, EDITED_COPIES[args.size])
    edited = np.array([False] * len(names) + [True] * len(extra_names))
    names, texts = names + extra_names, texts + extra_texts
    words = token_hashes(texts, "words")
    # one eligibility for every definition (the "words" count, which the targets are stated in)
    eligible = np.array([len(h) >= F.DEFAULT_MIN_TOKENS for h in words])
    log(f"{len(texts)} pages ({int(edited.sum())} edited copies), {int(eligible.sum())} with at least {F.DEFAULT_MIN_TOKENS} words")
    truths = {}
    for definition in DEFINITIONS:
        log(f"ground truth: exact 5-shingle Jaccard of every pair, words = {definition}")
        hashes = words if definition == "words" else token_hashes(texts, definition)
        truths[definition] = ground_truth(names, texts, edited, hashes, eligible)
    shipped = shipped_tokens(texts)
    tokenizers = {
        "shipped, exact check": shipped,
        "shipped": shipped,
        "attached (0.1)": token_hashes(texts, "attached"),
    }
    report: dict[str, object] = {
        "generated": time.strftime("%Y-%m-%d %H:%M"),
        "size": args.size,
        "pages": {"real": int((~edited).sum()), "edited": int(edited.sum()), "eligible": int(eligible.sum())},
        "fingerprint_params": F.FINGERPRINT_PARAMS,
        "results": {},
    }
    examples = []
    for label, hashes in tokenizers.items():
        log(f"deciding with the {label} tokenizer")
        fps = fingerprints(texts, hashes)
        flagged = decide(fps, eligible, texts if "exact check" in label else None)
        report["results"][label] = {d: rates(p, flagged) for d, p in truths.items()}
        if label == "shipped, exact check":
            p = truths["words"]
            found = np.isin(p.code, flagged)
            for name, lo, hi in Q.CLASSES[:3]:
                mask = Q.class_mask(p, lo, hi) & ~p.identical & (~found if lo >= 0.8 else found)
                for k in np.flatnonzero(mask)[:4]:
                    a, b = int(p.i[k]), int(p.j[k])
                    examples.append(
                        {"class": name, "a": names[a], "b": names[b], "jaccard": round(float(p.jaccard[k]), 3),
                         "estimate": F.jaccard_estimate(fps[a].minhash, fps[b].minhash)}
                    )
    report["examples (shipped, exact check: missed for J>=0.8, flagged below)"] = examples
    chain = [k for k, n in enumerate(names) if n in ("rust/std/iter/struct.Chain.html", "rust/core/iter/struct.Chain.html")]
    if len(chain) == 2:
        a, b = chain
        pair = {}
        for definition, p in truths.items():
            hit = np.flatnonzero((p.i == a) & (p.j == b))
            pair[f"J ({definition})"] = round(float(p.jaccard[hit[0]]), 3) if len(hit) else 0.0
        for label, hashes in list(tokenizers.items())[1:]:
            fa, fb = fingerprints([texts[a], texts[b]], [hashes[a], hashes[b]])
            pair[f"estimate ({label})"] = F.jaccard_estimate(fa.minhash, fb.minhash)
        report["std::iter::Chain vs core::iter::Chain"] = pair
    report["runtime_seconds"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quality_code.json").write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    text = markdown(report)
    (args.out / "quality_code.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


def _cell(row: dict[str, object]) -> str:
    rate = row["rate"]
    return "-" if rate is None else f"{rate:.3f} ({row['found']}/{row['pairs']})"


def markdown(report: dict) -> str:
    lines = [
        "# Near duplicates on code-heavy documentation",
        "",
        f"Generated {report['generated']} by benchmarks/quality_code.py (size {report['size']}): "
        f"{report['pages']['real']} real pages (Python 3.11 docs, two releases; Rust 1.63 std with its core/alloc twins), "
        f"{report['pages']['edited']} edited copies; {report['pages']['eligible']} pages with at least "
        f"{F.DEFAULT_MIN_TOKENS} words. Rates are found (J >= 0.8) or flagged (J < 0.8) over pairs that are not textually identical.",
        "",
        "Targets: J >= 0.9 >= 0.99 found; 0.8-0.9 >= 0.90 found; 0.5-0.8 <= 0.10 flagged; J < 0.5 <= 0.0005 flagged.",
        "",
    ]
    for group in Q.GROUPS:
        lines += [f"## Pairs: {group}", "", "| fingerprint tokens | J with words = | " + " | ".join(n for n, *_ in Q.CLASSES) + " |",
                  "|---|---|" + "---|" * len(Q.CLASSES)]
        for label, per_def in report["results"].items():
            for definition, res in per_def.items():
                lines.append(f"| {label} | {definition} | " + " | ".join(_cell(res[group][n]) for n, *_ in Q.CLASSES) + " |")
        lines.append("")
    pair = report.get("std::iter::Chain vs core::iter::Chain")
    if pair:
        lines += ["## std::iter::Chain vs core::iter::Chain", "", "| measure | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in pair.items()]
        lines.append("")
    lines += ["## Examples (shipped tokenizer with the exact check, words definition)", "", "| class | a | b | J | estimate |", "|---|---|---|---|---|"]
    for e in report["examples (shipped, exact check: missed for J>=0.8, flagged below)"]:
        lines.append(f"| {e['class']} | {e['a']} | {e['b']} | {e['jaccard']} | {e['estimate']} |")
    lines += ["", f"Runtime {report['runtime_seconds']} s."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
