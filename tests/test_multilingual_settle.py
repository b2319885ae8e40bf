"""One settled corpus on a real multilingual site: two sections of the Debian Administrator's
Handbook (tests/fixtures/pages/debian-handbook, debian-handbook 11.20220922), one in its 26
languages (many of them partial translations, each translated differently, near the English page
and not always near each other), one in six (three untranslated copies of the English text).

Crawled in two orders (the start page lists the pages forwards or backwards) at
``CONCURRENT_REQUESTS`` 1 and 16: the same export (every field but the fetch times) and the same
``export --chunks``. With ``DEDUP_AUTHORITY = ["*/en-US/*"]`` the English original represents its
copies, and what the partial translations translated goes with it as merged passages. Without it,
the longest text represents: a partial translation whose one translated title makes it longer
than the English text that three URLs serve (the documented default, see core.representative).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from crawl_helpers import exported
from local_site import LocalSite
from testing import run_crawl

PAGES = Path(__file__).parent / "fixtures" / "pages" / "debian-handbook"
PAGE = "sect.shell-environment.html"
MINT = "sect.linux-mint.html"
#: in en-US, two untranslated copies (cs-CZ, da-DK) and sv-SE, which translated one sidebar's title
ACCOUNTS = "sect.creating-accounts.html"
#: "LANG/PAGE" of every page of the site, sorted
LINKS = sorted(str(p.relative_to(PAGES)) for p in PAGES.glob("*/*.html"))
SETTINGS = {"DEDUP_WORKERS": 0, "DEDUP_LOGSTATS_INTERVAL": 0}


def reply(path: str):
    if path.startswith("/start/"):
        links = LINKS if path == "/start/forward" else LINKS[::-1]
        items = "".join(f'<li><a href="/{link}">{link}</a></li>' for link in links)
        return 200, {}, f"<html><body><ul>{items}</ul></body></html>".encode()
    if path.lstrip("/") in LINKS:
        return 200, {}, (PAGES / path.lstrip("/")).read_bytes()
    return 404, {}, b"<html><body><p>Not found</p></body></html>"


@pytest.fixture(scope="module")
def site():
    with LocalSite(reply) as served:
        yield served


def settled(site: LocalSite, out: Path, order: str, **settings) -> dict:
    run_crawl(f"{site.url}/start/{order}", out, {**SETTINGS, **settings})
    # (the start page, which lists the order, is a document of its own: left out)
    records = [r for r in exported(out / "store") if "/start/" not in r["url"]]
    for r in records:
        del r["first_seen"], r["last_seen"]
    chunks = [c for c in exported(out / "store", "--chunks") if not any("/start/" in u for u in c["urls"])]
    return {"export": sorted(records, key=lambda r: r["document_id"]), "chunks": chunks}


@pytest.fixture(scope="module")
def reference(site, tmp_path_factory):
    return settled(site, tmp_path_factory.mktemp("forward"), "forward", CONCURRENT_REQUESTS=1)


def _family(outcome: dict, page: str) -> list[dict]:
    """The settled documents of one section, as (languages of its sources, record)."""
    return [r for r in outcome["export"] if r["url"].endswith("/" + page)]


def test_the_copies_settle_with_the_original(site, reference):
    shell = sorted(sorted(s["url"].split("/")[3] for s in r["sources"]) for r in _family(reference, PAGE))
    assert shell == [["cs-CZ", "da-DK", "el-GR", "en-US"], ["de-DE"], ["fr-FR"]]
    [mint] = [r for r in _family(reference, MINT) if f"{site.url}/en-US/{MINT}" in {s["url"] for s in r["sources"]}]
    assert len(mint["sources"]) > 2 and mint["merged_passages"]  # partial translations, each its own text


def _accounts(outcome: dict) -> tuple[str, dict, str]:
    [accounts] = _family(outcome, ACCOUNTS)
    sources = {s["url"].split("/")[3]: s["reason"] for s in accounts["sources"]}
    return accounts["url"].split("/")[3], sources, accounts["text"]


def test_by_default_the_longest_text_represents_even_a_partial_translation(reference):
    """sv-SE's page is the English one with a sidebar's title in Swedish: 9 characters longer,
    served by one URL, where three serve the English text. The length decides: a truncated
    copy never represents the full one, and nothing in a text tells a translated line apart."""
    language, sources, text = _accounts(reference)
    assert (language, sources) == ("sv-SE", {
        "sv-SE": None, "cs-CZ": "near_duplicate", "da-DK": "near_duplicate", "en-US": "near_duplicate"})
    assert "TILLBAKA TILL GRUNDERNA" in text


def test_authority_makes_the_english_text_represent_its_partial_translation(site, tmp_path):
    outcome = settled(site, tmp_path, "forward", CONCURRENT_REQUESTS=1, DEDUP_AUTHORITY=["*/en-US/*"])
    language, sources, text = _accounts(outcome)
    assert (language, sources) == ("en-US", {
        "en-US": None, "cs-CZ": "exact_content", "da-DK": "exact_content", "sv-SE": "near_duplicate"})
    assert "BACK TO BASICS" in text and "TILLBAKA" not in text


@pytest.mark.parametrize("concurrency", [1, 16])
def test_the_settled_export_does_not_depend_on_order_or_concurrency(site, reference, tmp_path, concurrency):
    assert settled(site, tmp_path, "backward", CONCURRENT_REQUESTS=concurrency) == reference


def test_authority_makes_the_original_represent_its_copies(site, tmp_path):
    """The pages declare no language; only the URL tells the English page from its copies: the URL
    prefix decides. The untranslated copies add nothing; the partial translations add the lines
    they translated, each once, with its URL, and nothing the English page has."""
    outcome = settled(site, tmp_path, "backward", CONCURRENT_REQUESTS=16, DEDUP_AUTHORITY=["*/en-US/*"])
    [shell] = [r for r in _family(outcome, PAGE) if len(r["sources"]) > 1]
    assert shell["url"] == f"{site.url}/en-US/{PAGE}"
    assert {s["url"].split("/")[3]: s["reason"] for s in shell["sources"]} == {
        "en-US": None, "cs-CZ": "exact_content", "da-DK": "exact_content", "el-GR": "exact_content"
    }
    assert shell["merged_passages"] == []
    [mint] = [r for r in outcome["export"] if r["url"] == f"{site.url}/en-US/{MINT}"]
    members = {s["url"] for s in mint["sources"]} - {mint["url"]}
    passages = mint["merged_passages"]
    assert passages and {p["source_url"] for p in passages} <= members
    english = {line.casefold() for line in mint["text"].splitlines()}
    lines = [line.casefold() for p in passages for line in p["text"].splitlines()]
    assert len(lines) == len(set(lines)) and not english & set(lines)
