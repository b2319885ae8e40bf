"""The URL layer on real crawls of the demo site (issue: URL layer)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from crawl_helpers import StoreView, final_documents
from local_site import LocalSite
from testing import DemoServer, load_manifest, run_crawl

from scrapy_dedup.core.urls import url_key

MANIFEST = load_manifest()
GROUPS = {g["name"]: g for g in MANIFEST["groups"]}
HOST_RULES = MANIFEST["host_rules"]
URL_VARIANT_GROUPS = [g["name"] for g in MANIFEST["groups"] if g["kind"] == "url_variant"]


@pytest.fixture(scope="module")
def first_crawl(tmp_path_factory):
    """One crawl of the demo site with the add-on, then a second one on the same store."""
    out = tmp_path_factory.mktemp("url-layer")
    with DemoServer() as server:
        first = run_crawl(server.url + "/", out, {"DEDUP_HOST_RULES": HOST_RULES})
        first_requests = server.requests
        store = StoreView(out / "store", HOST_RULES)
        server.clear()
        second = run_crawl(server.url + "/", out, {"DEDUP_HOST_RULES": HOST_RULES})
        yield server, first, first_requests, store, second, server.requests


def fetch_counts(server, requests):
    """How many times each url_key reached the server."""
    counts = {}
    for target in requests:
        key = url_key(server.url_for(target), HOST_RULES)
        counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.mark.smoke
@pytest.mark.parametrize("name", URL_VARIANT_GROUPS)
def test_each_group_of_url_variants_is_fetched_once(first_crawl, name):
    server, _, requests, _, _, _ = first_crawl
    group = GROUPS[name]
    counts = fetch_counts(server, requests)
    keys = {url_key(server.url_for(href), HOST_RULES) for href in [group["canonical"], *group["variants"]]}
    assert len(keys) == 1, f"{name}: the variants must share one url_key"
    assert counts[keys.pop()] == 1


@pytest.mark.smoke
def test_no_url_is_fetched_twice(first_crawl):
    server, _, requests, _, _, _ = first_crawl
    repeated = {key: n for key, n in fetch_counts(server, requests).items() if n > 1}
    assert repeated == {}


def test_variants_dropped_before_fetch_are_recorded(first_crawl):
    server, result, _, store, _, _ = first_crawl
    assert result.stat("dedup/url/dropped/seen") > 0
    variant = server.url_for(GROUPS["tracking_params"]["variants"][0])

    recorded = store.variants[variant]
    assert recorded["key"] == url_key(server.url_for(GROUPS["tracking_params"]["canonical"]))


def test_the_log_counts_requests_dropped_before_fetch_as_requests(first_crawl):
    # the log's count is of requests (a link to a page already scheduled, each time it is met);
    # the summary counts URL variants (URLs): the log must not call requests URLs
    _, result, _, _, _, _ = first_crawl
    dropped = sum(v for k, v in result.stats.items() if k.startswith("dedup/url/dropped/"))
    assert dropped > 0
    assert f"dedup: {dropped} requests dropped before fetch; documents: " in result.log
    assert "URLs dropped before fetch" not in result.log


def test_facets_fetched_once_per_allowlisted_combination(first_crawl):
    server, _, requests, _, _, _ = first_crawl
    shop = GROUPS["shop_facets"]
    fetched = [t for t in requests if t.startswith("/shop/")]
    expected = [server.url_for(u) for u in shop["expected_fetch"]]
    assert sorted(url_key(server.url_for(t), HOST_RULES) for t in fetched) == sorted(
        url_key(u, HOST_RULES) for u in expected
    )


def test_without_host_rules_facets_multiply(tmp_path):
    with DemoServer() as server:
        run_crawl(server.url + "/", tmp_path)
        shop_fetches = [t for t in server.requests if t.startswith("/shop/")]
    assert len(shop_fetches) > 2 * len(GROUPS["shop_facets"]["expected_fetch"])


@pytest.mark.smoke
def test_redirect_source_is_an_alias_of_its_target(first_crawl):
    server, result, requests, store, _, _ = first_crawl
    group = GROUPS["redirect"]
    source = store.record(server.url_for(group["variants"][0]))
    assert source.status == "redirect" and source.reason == "redirect"
    assert source.duplicate_of == store.key(server.url_for(group["canonical"]))
    assert source.http_status == group["status"]
    assert result.stat("dedup/url/redirect") >= 1
    assert requests.count(group["canonical"]) == 1


def test_canonical_targets_fetched_once_though_nothing_links_to_them(first_crawl):
    server, result, requests, store, _, _ = first_crawl
    for name in ("rel_canonical_html", "rel_canonical_header"):
        group = GROUPS[name]
        assert group["target_linked"] is False
        assert requests.count(group["canonical"]) == 1, name
        for variant in group["variants"]:
            record = store.record(server.url_for(variant))
            assert record.reason == "rel_canonical", (name, variant)
            assert store.representative_url(server.url_for(variant)) == server.url_for(group["canonical"])
    assert result.stat("dedup/canonical/declared/html") >= 1
    assert result.stat("dedup/canonical/declared/header") >= 1
    assert result.stat("dedup/canonical/honored") == 2


def test_off_host_and_file_canonicals_are_ignored(first_crawl):
    server, result, requests, store, _, _ = first_crawl
    assert result.stat("dedup/canonical/ignored/off_scope") >= 1
    assert result.stat("dedup/canonical/ignored/scheme") >= 1
    emitted = {item["url"] for item in final_documents(result.items)}
    for name in ("canonical_off_scope", "canonical_bad_scheme"):
        page = server.url_for(GROUPS[name]["pages"][0])
        assert page in emitted, name
        assert store.record(page).reason is None
    assert not any("other.example.com" in hit.host for hit in server.hits())


@pytest.mark.smoke
def test_canonical_mismatch_keeps_both_pages(first_crawl):
    server, result, _, store, _, _ = first_crawl
    group = GROUPS["canonical_mismatch"]
    emitted = {item["url"] for item in final_documents(result.items)}
    assert {server.url_for(p) for p in group["pages"]} <= emitted
    assert store.record(server.url_for(group["page"])).canonical_mismatch == server.url_for(group["canonical_href"])
    assert result.stat("dedup/canonical/mismatch") == 1


@pytest.mark.smoke
def test_second_crawl_fetches_only_the_pages_that_link(first_crawl):
    server, _, _, store, second, second_requests = first_crawl
    assert second_requests, "the start page is fetched again"
    for target in second_requests:
        record = store.records.get(url_key(server.url_for(target), HOST_RULES))
        # hubs, and documents whose links lead on to pages that may be new
        assert target == "/" or (record is not None and (record.kind == "hub" or record.links)), target
    assert second.stat("dedup/url/dropped/fresh") > 0
    assert second.items == [] or all(i["dedup"]["status"] != "new" for i in second.items)


def test_dont_dedup_and_plain_scrapy_fetch_everything(tmp_path):
    with DemoServer() as server:
        run_crawl(server.url + "/", tmp_path / "plain", dedup=False)
        plain = len(server.requests)
        server.clear()
        run_crawl(server.url + "/", tmp_path / "dedup", {"DEDUP_HOST_RULES": HOST_RULES})
        deduped = len(server.requests)
    assert deduped < plain


def test_components_listed_by_hand_work_without_the_addon(tmp_path):
    settings = {
        "ADDONS": {},
        "DEDUP_HOST_RULES": HOST_RULES,
        "DUPEFILTER_CLASS": "scrapy_dedup.dupefilter.DedupDupeFilter",
        "SPIDER_MIDDLEWARES": {"scrapy_dedup.spidermw.DedupSpiderMiddleware": 950},
        "DOWNLOADER_MIDDLEWARES": {"scrapy_dedup.downloadermw.DedupDownloaderMiddleware": 590},
        "ITEM_PIPELINES": {"scrapy_dedup.pipeline.DedupPipeline": 200},
    }
    with DemoServer() as server:
        result = run_crawl(server.url + "/", tmp_path, settings)
    assert result.stat("dedup/url/dropped/seen") > 0
    assert result.stat("dedup/doc/exact_duplicate") > 0
    assert all("dedup" in item for item in result.items)


def test_disabled_extension_leaves_scrapy_alone(tmp_path):
    with DemoServer() as server:
        result = run_crawl(server.url + "/", tmp_path, {"DEDUP_ENABLED": False})
    assert not result.stats_with_prefix("dedup/")
    assert result.items and all("dedup" not in item for item in result.items)


@pytest.mark.smoke
def test_a_store_held_by_another_process_fails_the_crawl_at_start(tmp_path):
    from scrapy_dedup.store.leveldb import LevelDBStore

    with DemoServer() as server, LevelDBStore(str(tmp_path / "store"), {"held": True}):
        result = run_crawl(server.url + "/", tmp_path, check=False)
        requests = server.requests
    assert "in use by another process" in result.log
    assert requests == []
    assert result.items == []


def test_robots_txt_is_no_page_and_an_image_counts_among_the_assets(tmp_path):
    import json
    import subprocess
    import sys

    from local_site import LocalSite

    png = b"\x89PNG\r\n\x1a\n" + bytes(64)

    def reply(path: str):
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, b"User-agent: *\nDisallow: /private/\n"
        if path == "/logo.png":
            return 200, {"Content-Type": "image/png"}, png
        body = "<p>" + " ".join(f"word{i}" for i in range(80)) + '</p><a href="/logo.png">logo</a>'
        return 200, {}, f"<html><head><title>home</title></head><body>{body}</body></html>".encode()

    with LocalSite(reply) as site:
        result = run_crawl(site.url + "/", tmp_path, {"ROBOTSTXT_OBEY": True})
    assert result.stat("robotstxt/response_count") == 1
    records = StoreView(tmp_path / "store").records
    assert not any(key.endswith("/robots.txt") for key in records)
    assert records[url_key(site.url + "/logo.png")].status == "asset"
    summary = subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", "summary", "--store", str(tmp_path / "store"), "--format", "jsonl"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert summary.returncode == 0, summary.stderr
    table = subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", "summary", "--store", str(tmp_path / "store")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    ).stdout
    assert "asset 1" in table, table
    assert json.loads(summary.stdout)["url_records"] == 2


def _redirecting_site(raw_path: str) -> tuple[int, dict[str, str], bytes]:
    text = " ".join(f"target{i % 41} passage{i % 13}." for i in range(200))
    return {
        "/": (200, {}, b'<html><body><a href="/refresh.html">r</a> <a href="/moved">m</a></body></html>'),
        "/refresh.html": (
            200, {}, b'<html><head><meta http-equiv="refresh" content="0; url=/target.html#part"></head></html>',
        ),
        "/moved": (301, {"Location": "/other.html"}, b""),
        "/target.html": (200, {}, f"<html><body><article><p>{text}</p></article></body></html>".encode()),
        "/other.html": (200, {}, f"<html><body><article><p>other {text}</p></article></body></html>".encode()),
    }.get(raw_path.split("?")[0], (404, {}, b"not found"))


def test_a_redirect_fetched_once_counts_one_fetch(tmp_path):
    """A meta refresh (a Texinfo manual's pages of its old node names) is a 200 the crawl records
    as a fetch before Scrapy turns it into a redirect: recording the redirect counted the same
    fetch again (``lookup``: fetched 2 time(s)); an HTTP 301 counts once too."""
    with LocalSite(_redirecting_site) as site:
        run_crawl(site.url + "/", tmp_path, {"DEDUP_WORKERS": 1})
    store = StoreView(tmp_path / "store")
    for source, target in (("/refresh.html", "/target.html"), ("/moved", "/other.html")):
        record = store.record(site.url + source)
        assert (record.status, record.duplicate_of) == ("redirect", store.key(site.url + target))
        assert record.fetch_count == 1, source


def test_a_redirect_to_the_directory_with_its_slash_is_followed(tmp_path):
    """A static server answers a link to a directory without its slash (``/news``) with a 301
    to ``/news/``: one URL key (the slash is stripped), so the target was dropped before fetch
    as seen, and every page below it was never crawled (all of crmsh's documentation but its
    start page). The URL fetched is the one with the slash: a link to it is no variant of the
    page (``aliases`` listed ``/news/`` as a url_variant of ``/news/``), whether it was met
    before the redirect or after it, in this run or in the next; the spelling without the slash
    is one, whether it was fetched and redirected or met after (the export's ``sources`` must
    not depend on the fetch order)."""
    from local_site import FileSite

    def words(topic: str) -> str:
        return " ".join(f"{topic}{i % 37} note{i % 11}." for i in range(200))

    site_dir = tmp_path / "site"
    (site_dir / "news" / "2014").mkdir(parents=True)
    (site_dir / "index.html").write_text('<a href="/news">News</a> <a href="/news/">All the news</a>')
    (site_dir / "news" / "index.html").write_text(
        f'<html><head><title>News</title></head><body><p>{words("release")}</p><a href="2014">2014</a></body></html>'
    )
    (site_dir / "news" / "2014" / "index.html").write_text(
        f"<html><head><title>2014</title></head><body><p>{words('year')}</p><a href='/news/'>up</a></body></html>"
    )
    out = tmp_path / "out"

    def spellings() -> dict[str, str]:
        # every URL of the key the page was fetched under; the others are its variants, the
        # spellings the crawl met without the slash (fetched and redirected, or dropped)
        store = StoreView(out / "store")
        assert [key for key, record in store.records.items() if record.url not in (key + "/", site.url + "/")] == []
        return {url: variant["key"] for url, variant in store.variants.items()}

    with FileSite(site_dir) as site:
        without_slash = {site.url + "/news": site.url + "/news", site.url + "/news/2014": site.url + "/news/2014"}
        result = run_crawl(site.url + "/", out, {"DEDUP_WORKERS": 1})
        assert sorted(item["url"] for item in result.items) == [site.url + "/news/", site.url + "/news/2014/"]
        assert site.requests(200) == ["/", "/news/", "/news/2014/"]
        assert spellings() == without_slash
        # the next run meets /news/2014/ with its slash first, from the start page
        (site_dir / "index.html").write_text('<a href="/news/2014/">2014</a> <a href="/news">News</a>')
        run_crawl(site.url + "/", out, {"DEDUP_WORKERS": 1})
        assert spellings() == without_slash


def _home_and_guides(path: str):
    """A home page of its own text linking to two guides, each linking back home."""
    pages = {
        "/": ("home", "The home page welcomes readers to the harbour manual", ["/guide1.html", "/guide2.html"]),
        "/guide1.html": ("guide 1", "Mooring lines are doubled before a storm", ["/"]),
        "/guide2.html": ("guide 2", "Fuel docks open at dawn on weekdays", ["/", "/guide1.html"]),
    }
    if path not in pages:
        return 404, {}, b"not found"
    title, sentence, links = pages[path]
    body = " ".join(f"<p>{sentence}, note {i} of the {title} page.</p>" for i in range(30))
    body += "".join(f'<a href="{link}">{link}</a>' for link in links)
    return 200, {}, f"<html><head><title>{title}</title></head><body>{body}</body></html>".encode()


def _paths(items) -> list[str]:
    return sorted(urlsplit(item["url"]).path for item in items)


@pytest.mark.parametrize("backend", ["leveldb", "redis"])
def test_a_crawl_spider_s_start_page_is_an_item_as_in_plain_scrapy(tmp_path, monkeypatch, backend, request):
    """A ``CrawlSpider``'s start page yields no item (``parse_start_url``); plain Scrapy makes it
    one when a page links back to it, through the rule's callback. The start request used to be
    marked seen, so that link was dropped and the home page's text never reached the corpus."""
    from crawl_helpers import tutorial_crawl

    settings = {}
    if backend == "redis":
        prefix = request.getfixturevalue("redis_prefix")
        settings = {"DEDUP_STORE": request.getfixturevalue("redis_single").url, "DEDUP_REDIS_PREFIX": prefix}
    _, plain = tutorial_crawl(_home_and_guides, tmp_path / "plain", monkeypatch, {"ADDONS": {}})
    _, deduped = tutorial_crawl(_home_and_guides, tmp_path / "dedup", monkeypatch, settings)
    assert _paths(plain.items) == _paths(deduped.items) == ["/", "/guide1.html", "/guide2.html"]
    assert [item["dedup"]["status"] for item in deduped.items] == ["new"] * 3
    assert deduped.stat("dedup/doc/new") == 3
