"""Real pages for the benchmarks: Debian documentation packages, downloaded and unpacked (never
installed) under benchmarks/.cache/, plus a cache of their extracted texts.

Used by benchmarks/quality.py and meant to be reused by the speed benchmarks:

    from _corpus import POSTGRES_RELEASES, package_dir, html_pages, extracted_texts
    root = package_dir(POSTGRES_RELEASES["15.18"]) / POSTGRES_HTML
    texts = extracted_texts(root, html_pages(root))   # {relative path: text}

Downloads need ``apt-get`` (Debian/Ubuntu) and network access; each step says what it does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
DEBS = CACHE / "debs"
UNPACKED = CACHE / "unpacked"
TEXTS = CACHE / "texts"

#: Two releases of the same documentation set (see /work/shared/corpora/README.md).
POSTGRES_RELEASES = {
    "15.18": "postgresql-doc-15=15.18-0+deb12u1",
    "15.20": "postgresql-doc-15=15.20-0+deb12u1",
}
POSTGRES_HTML = Path("usr/share/doc/postgresql-doc-15/html")

#: The sites of the crawl cost benchmark (bench_crawl.py --part cost), each a kind the others are
#: not: {name: (package spec, [(URL prefix, directory in the package)])}.
COST_SITES = {
    # a Publican book (div.para paragraphs, which the fast mode cuts), in three languages
    "harden-doc 3.19+nmu1 (Publican; en, fr, de)": ("harden-doc=3.19+nmu1", [
        (f"/{lang}/", f"usr/share/doc/harden-doc/html/{lang}") for lang in ("en-US", "fr-FR", "de-DE")]),
    # two releases of one manual: near-duplicate pages under two prefixes
    "tomcat10-docs 10.1.55 + 10.1.60 (two releases)": (
        ["tomcat10-docs=10.1.55-1~deb12u1", "tomcat10-docs=10.1.60-1~deb12u1"],
        [("/10.1.55/", "usr/share/tomcat10-docs/docs"), ("/10.1.60/", "usr/share/tomcat10-docs/docs")]),
    # a large site of large pages: the Java 17 API reference (javadoc, 10,141 pages)
    "openjdk-17-doc 17.0.21.1 (javadoc, 10,141 pages)": ("openjdk-17-doc=17.0.21.1+2-1~deb12u1", [
        ("/api/", "usr/share/doc/openjdk-17-jre-headless/api")]),
}


def cost_site_trees(name: str) -> list[tuple[str, Path]]:
    """[(URL prefix, directory)] of one of COST_SITES, downloaded and unpacked when missing."""
    specs, trees = COST_SITES[name]
    specs = [specs] * len(trees) if isinstance(specs, str) else specs
    return [(prefix, package_dir(spec) / sub) for spec, (prefix, sub) in zip(specs, trees)]


def _log(message: str) -> None:
    print(f"[corpus] {message}", file=sys.stderr, flush=True)


def _deb_name(spec: str) -> tuple[str, str]:
    # apt-get download names files NAME_VERSION_ARCH.deb with ':' escaped as %3a.
    name, _, version = spec.partition("=")
    return name, version.replace(":", "%3a")


def download_deb(spec: str) -> Path:
    """Return the path of the .deb for ``spec`` ("name" or "name=version"), downloading it
    with ``apt-get download`` into the cache when it is missing."""
    DEBS.mkdir(parents=True, exist_ok=True)
    name, version = _deb_name(spec)
    pattern = f"{name}_{version or '*'}_*.deb"
    found = sorted(DEBS.glob(pattern))
    if found:
        return found[-1]
    if shutil.which("apt-get") is None:
        raise SystemExit(f"{spec} is not cached in {DEBS} and apt-get is not available to download it")
    _log(f"{spec} not cached: downloading with apt-get into {DEBS}")
    cmd = ["apt-get", "download", "-q", spec]
    if subprocess.run(cmd, cwd=DEBS, capture_output=True).returncode != 0:
        _log("apt-get download failed; running apt-get update -q once and retrying")
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
        subprocess.run(cmd, cwd=DEBS, check=True, capture_output=True)
    found = sorted(DEBS.glob(pattern))
    if not found:
        raise SystemExit(f"apt-get download {spec} produced no {pattern} in {DEBS}")
    return found[-1]


def package_dir(spec: str) -> Path:
    """Return the directory a package is unpacked in (``dpkg-deb -x``), downloading and
    unpacking it when missing."""
    deb = download_deb(spec)
    target = UNPACKED / deb.stem
    done = target / ".unpacked"
    if not done.exists():
        _log(f"unpacking {deb.name} into {target}")
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
        done.touch()
    return target


#: A directory of HTML pages to use instead of the PostgreSQL docs (the tests point it at the
#: demo site, so that they never depend on a download).
PAGES_ENV = "SCRAPY_DEDUP_BENCH_PAGES"


def docs_root() -> Path:
    """The pages the speed benchmarks run on: ``$SCRAPY_DEDUP_BENCH_PAGES``, else PostgreSQL 15.20's docs."""
    override = os.environ.get(PAGES_ENV)
    if override:
        return Path(override)
    return package_dir(POSTGRES_RELEASES["15.20"]) / POSTGRES_HTML


def html_pages(root: Path) -> list[str]:
    """Relative paths of the *.html files under ``root`` (symlinks included), sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.html") if p.is_file())


def _extract_one(path: str) -> str:
    from scrapy_dedup.extraction.main_text import extract_text  # imported in the worker

    body = Path(path).read_bytes()
    return extract_text(body, url="file://" + path)


def _extract_cache_key(root: Path, pages: list[str]) -> str:
    from scrapy_dedup.extraction.main_text import EXTRACT_PARAMS

    digest = hashlib.sha256(json.dumps([str(root), pages, EXTRACT_PARAMS], sort_keys=True).encode())
    return digest.hexdigest()[:16]


def extracted_texts(root: Path, pages: Iterable[str], workers: int = 2) -> dict[str, str]:
    """Return {relative path: extract_text(page)} for ``pages`` under ``root``, from the cache
    in benchmarks/.cache/texts when the same pages were extracted with the same parameters,
    otherwise extracting with ``workers`` processes and caching the result."""
    pages = list(pages)
    TEXTS.mkdir(parents=True, exist_ok=True)
    label = root.relative_to(UNPACKED).parts[0] if root.is_relative_to(UNPACKED) else root.name
    cache = TEXTS / f"{label}-{_extract_cache_key(root, pages)}.json"
    if cache.exists():
        return json.loads(cache.read_text(encoding="utf-8"))
    _log(f"extracting {len(pages)} pages of {root} with {workers} workers (cached afterwards)")
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        texts = list(pool.map(_extract_one, [str(root / p) for p in pages], chunksize=16))
    elapsed = time.perf_counter() - start
    _log(f"extracted in {elapsed:.1f} s ({1000 * elapsed * workers / max(len(pages), 1):.1f} ms/page/worker)")
    result = dict(zip(pages, texts))
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, cache)
    return result


def postgres_texts(workers: int = 2) -> dict[str, dict[str, str]]:
    """{release: {page: text}} for the two postgresql-doc-15 releases."""
    out = {}
    for release, spec in POSTGRES_RELEASES.items():
        root = package_dir(spec) / POSTGRES_HTML
        out[release] = extracted_texts(root, html_pages(root), workers=workers)
    return out


if __name__ == "__main__":
    for release, texts in postgres_texts().items():
        empty = sum(1 for t in texts.values() if not t)
        print(f"{release}: {len(texts)} pages, {empty} with no text, {sum(map(len, texts.values()))} chars")
