"""Merge without loss: how much of what merged pages add the settled export still holds.

    .venv/bin/python benchmarks/bench_merge.py            # git-doc and debian-handbook (en-US, fr-FR)

Real near duplicates, decided as a crawl decides them (``ContentIndex.ingest`` of each page's
extracted text into a LevelDB store, then ``settle``), on two Debian doc packages nobody here had
measured (see benchmarks/_corpus.py; downloaded with apt-get when missing):

- git-doc 1:2.39.5-0+deb12u3: Git's manual pages as HTML, whose commands share option blocks
  (``git fetch`` and ``git pull``, the diff options of ``git diff``, ``log``, ``show``...);
- debian-handbook 11.20220922: the English book and its 25 translations, whose untranslated
  parts are English copies with some lines translated (partial translations).

For every document with a member whose text is not the representative's, the member's unique
text is its lines (canonical text: case, whitespace and Unicode form folded) that the
representative does not have, each distinct line once per document. It is retrievable when it
is found in the document's ``export --chunks`` chunks (the texts of every chunk of that
document, joined). Reported: the share of the unique characters retrievable, with the
representative's text alone (the export before merged passages) and with the merged passages;
the characters of the merged passages that the representative has too (counted twice: target 0);
and what the passages add to the export's size.

On the handbook it also counts the settled documents that hold the English original
(``en-US``) and other pages, and how many of them another page represents, split in two: a
partial translation (another text: the representative's text is not the English one), and an
exact copy of the English text under another language's URL; with the default representative
order, and with ``DEDUP_AUTHORITY = ["*/en-US/*"]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from scrapy_dedup.store.records import get_cluster, get_url, members_of

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _corpus import extracted_texts, html_pages, package_dir  # noqa: E402
from run_all import fmt, log, row, write_result  # noqa: E402

NAME = "merge"
RESULTS = HERE / "results"
SETTINGS = {"max_distance": 3, "min_jaccard": 0.8, "min_tokens": 50}
#: (label, package, directory of the HTML, subdirectories to take (None: all))
SITES = [
    ("git-doc 1:2.39.5-0+deb12u3", "git-doc=1:2.39.5-0+deb12u3", "usr/share/doc/git-doc", None),
    ("debian-handbook 11.20220922, 26 languages", "debian-handbook=11.20220922",
     "usr/share/doc/debian-handbook/html", None),
]
SIZES = ("tiny", "default", "large")
#: ``--size tiny`` (the tests): the demo site's pages, never a download
DEMO = HERE.parent / "example_project" / "demo_site"


def _lines(text: str) -> list[str]:
    from scrapy_dedup.core.text import canonical_text

    return [c for c in (canonical_text(line) for line in text.splitlines()) if c]


def pages(package: str | None, html: str, subdirs: tuple[str, ...] | None) -> dict[str, str]:
    root = package_dir(package) / html if package else Path(html)
    paths = [p for p in html_pages(root) if (subdirs is None or p.split("/", 1)[0] in subdirs)
             and "Common_Content/" not in p]
    texts = extracted_texts(root, paths)
    return {p: t for p, t in texts.items() if t and t.strip()}


def measure(texts: dict[str, str], tmp: Path, authority: tuple[str, ...] = ()) -> dict:
    from scrapy_dedup.core.fingerprints import fingerprint, raw_hash
    from scrapy_dedup.core.text import canonical_text
    from scrapy_dedup.decide.index import ContentIndex, Document
    from scrapy_dedup.decide.settle import settle
    from scrapy_dedup.reports import export
    from scrapy_dedup.store.leveldb import LevelDBStore

    urls = {f"http://docs.example/{path}": text for path, text in texts.items()}
    with LevelDBStore(str(tmp / "store"), {"bench": NAME}) as store:
        store.begin_run()
        index = ContentIndex(store, store.run, authority=authority, **SETTINGS)
        for url in sorted(urls):
            text = urls[url]
            index.ingest(Document(url, url, fingerprint(text), raw_hash(text.encode()), text=text))
        settle(store, authority=authority, **SETTINGS)
        counts = export.ExportCounts()
        docs = list(export.documents(store, counts))
        by_doc: dict[str, list[str]] = defaultdict(list)
        for chunk in export.unique_chunks(iter(docs), export.ExportCounts()):
            for occurrence in chunk["documents"]:
                by_doc[occurrence["document_id"]].append(chunk["text"])
        member_records = {
            d["document_id"]: [get_url(store, k) for k in members_of(store, get_cluster(store, d["document_id"]))]
            for d in docs
        }
        member_urls = {cid: [r.url for r in records] for cid, records in member_records.items()}
    out = {"pages": len(urls), "documents": len(docs), "merged_documents": 0, "members": 0, "unique_chars": 0,
           "retrievable_before": 0, "retrievable_after": 0, "counted_twice_chars": 0, "passages": 0,
           "passage_chars": 0, "export_chars": 0, "with_original": 0, "translation_represents": 0,
           "copy_represents": 0}
    for doc in docs:
        # a document holding the English original and other pages: which one represents it
        held = member_records[doc["document_id"]]
        english = [r.content_hash for r in held if "/en-US/" in r.url]
        if len(held) > 1 and english and "/en-US/" not in doc["url"]:
            rep_hash = next(r.content_hash for r in held if r.url == doc["url"])
            out["translation_represents" if rep_hash != english[0] else "copy_represents"] += 1
        out["with_original"] += len(held) > 1 and bool(english)
        out["export_chars"] += len(doc["text"]) + sum(len(p["text"]) for p in doc["merged_passages"])
        rep_lines = set(_lines(doc["text"]))
        unique: set[str] = set()
        members = 0
        for url in member_urls[doc["document_id"]]:
            text = urls.get(url)
            if url == doc["url"] or text is None or text == doc["text"]:
                continue
            members += 1
            unique.update(line for line in _lines(text) if line not in rep_lines)
        for p in doc["merged_passages"]:
            out["passages"] += 1
            out["passage_chars"] += len(p["text"])
            out["counted_twice_chars"] += sum(len(line) for line in _lines(p["text"]) if line in rep_lines)
        if not unique:
            continue
        out["merged_documents"] += 1
        out["members"] += members
        before = canonical_text(doc["text"])
        after = canonical_text("\n".join(by_doc[doc["document_id"]]))
        for line in unique:
            out["unique_chars"] += len(line)
            out["retrievable_before"] += len(line) if line in before else 0
            out["retrievable_after"] += len(line) if line in after else 0
    return out


def _measured(texts: dict[str, str], authority: tuple[str, ...] = ()) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-merge-"))
    try:
        return measure(texts, tmp, authority)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows, results = [], {}
    sites = [("demo site", None, str(DEMO), None)] if args.size == "tiny" else SITES
    for label, package, html, subdirs in sites:
        texts = pages(package, html, subdirs)
        res = _measured(texts)
        log(NAME, f"{label}: {res}")
        results[label] = res
        unique = res["unique_chars"]
        after = res["retrievable_after"] / unique if unique else 1.0
        before = res["retrievable_before"] / unique if unique else 1.0
        what = f"{label}: {res['merged_documents']} documents with {res['members']} merged pages of other text"
        rows.append(row(NAME, f"{what}: their unique text retrievable from export --chunks",
                        f"{after:.1%} of {unique:,} chars", f"representative's text alone {before:.1%}",
                        target="100%", met=res["retrievable_after"] == unique))
        rows.append(row(NAME, f"{label}: merged passages' text the representative has too (counted twice)",
                        f"{res['counted_twice_chars']:,} chars", "", target="0", met=res["counted_twice_chars"] == 0))
        share = res["passage_chars"] / res["export_chars"] if res["export_chars"] else 0.0
        rows.append(row(NAME, f"{label}: merged passages in the export", f"{res['passages']:,} passages, "
                        f"{fmt(res['passage_chars'])} chars ({share:.1%} of the export's text)", ""))
        if res["with_original"]:
            steered = _measured(texts, ("*/en-US/*",))
            results[label + ", DEDUP_AUTHORITY */en-US/*"] = steered
            for what, field in (("a partial translation (another text)", "translation_represents"),
                                ("an exact copy under another language's URL", "copy_represents")):
                rows.append(row(NAME, f"{label}: documents holding the English original that {what} represents",
                                f"{res[field]} of {res['with_original']} (default order)",
                                f"DEDUP_AUTHORITY = ['*/en-US/*']: {steered[field]} of {steered['with_original']}",
                                target="0", met=res[field] == 0))
    write_result(NAME, {"size": args.size, "sites": results, "rows": rows}, args.out)
    for r in rows:
        print(f"{r['measure']}: {r['scrapy_dedup']} ({r['alternatives']}) target {r['target'] or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
