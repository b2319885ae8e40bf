"""One settled corpus on a real multilingual site: six language versions of one section of the
Debian Administrator's Handbook (tests/fixtures/pages/debian-handbook, debian-handbook 11.20220922),
three of them untranslated copies that settle into one document with the English original.

Crawled in two orders (the start page lists the languages forwards or backwards) at
``CONCURRENT_REQUESTS`` 1 and 16: the same export (every field but the fetch times) and the same
``export --chunks``. With ``DEDUP_AUTHORITY = ["*/en-US/*"]`` the English original represents
its untranslated copies.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from local_site import LocalSite
from testing import run_crawl

PAGES = Path(__file__).parent / "fixtures" / "pages" / "debian-handbook"
LANGS = ["cs-CZ", "da-DK", "de-DE", "el-GR", "en-US", "fr-FR"]
PAGE = "sect.shell-environment.html"
SETTINGS = {"DEDUP_WORKERS": 0, "DEDUP_LOGSTATS_INTERVAL": 0}


def reply(path: str):
    if path.startswith("/start/"):
        links = "".join(f'<li><a href="/{lang}/{PAGE}">{lang}</a></li>' for lang in path[len("/start/"):].split(","))
        return 200, {}, f"<html><body><ul>{links}</ul></body></html>".encode()
    lang, _, name = path.strip("/").partition("/")
    if lang in LANGS and name == PAGE:
        return 200, {}, (PAGES / lang / PAGE).read_bytes()
    return 404, {}, b"<html><body><p>Not found</p></body></html>"


@pytest.fixture(scope="module")
def site():
    with LocalSite(reply) as served:
        yield served


def export(out: Path, *args: str) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "scrapy", "dedup", "export", "--store", str(out / "store"), *args],
                          capture_output=True, text=True, timeout=120, cwd=out)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def settled(site: LocalSite, out: Path, order: list[str], **settings) -> dict:
    run_crawl(f"{site.url}/start/{','.join(order)}", out, {**SETTINGS, **settings})
    # (the start page, which lists the order, is a document of its own: left out)
    records = [r for r in export(out) if "/start/" not in r["url"]]
    for r in records:
        del r["first_seen"], r["last_seen"]
    chunks = [c for c in export(out, "--chunks") if not any("/start/" in u for u in c["urls"])]
    return {"export": sorted(records, key=lambda r: r["document_id"]), "chunks": chunks}


@pytest.fixture(scope="module")
def reference(site, tmp_path_factory):
    return settled(site, tmp_path_factory.mktemp("forward"), LANGS, CONCURRENT_REQUESTS=1)


def test_the_partial_translations_settle_with_the_original(site, reference):
    docs = {tuple(sorted(s["url"].split("/")[3] for s in r["sources"])): r for r in reference["export"]}
    assert sorted(docs) == [("cs-CZ", "da-DK", "el-GR", "en-US"), ("de-DE",), ("fr-FR",)]


@pytest.mark.parametrize("concurrency", [1, 16])
def test_the_settled_export_does_not_depend_on_order_or_concurrency(site, reference, tmp_path, concurrency):
    assert settled(site, tmp_path, LANGS[::-1], CONCURRENT_REQUESTS=concurrency) == reference


def test_authority_makes_the_original_represent_its_untranslated_copies(site, tmp_path):
    """The copies extract to the English text itself (the pages declare no language; only the
    URL tells them apart): the URL prefix decides, and the copies add nothing to carry."""
    outcome = settled(site, tmp_path, LANGS[::-1], CONCURRENT_REQUESTS=16, DEDUP_AUTHORITY=["*/en-US/*"])
    [doc] = [r for r in outcome["export"] if len(r["sources"]) > 1]
    assert doc["url"] == f"{site.url}/en-US/{PAGE}"
    assert {s["url"].split("/")[3]: s["reason"] for s in doc["sources"]} == {
        "en-US": None, "cs-CZ": "exact_content", "da-DK": "exact_content", "el-GR": "exact_content"
    }
    assert doc["merged_passages"] == []
