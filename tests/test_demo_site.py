"""The demo site, its server and the ``site`` spider, WITHOUT the dedup extension.

The crawl test runs ``scrapy crawl site`` in a subprocess (ADDONS={}) against a
DemoServer running in this process.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from parsel import Selector

EXAMPLE_PROJECT = Path(__file__).resolve().parent.parent / "example_project"
if str(EXAMPLE_PROJECT) not in sys.path:
    sys.path.insert(0, str(EXAMPLE_PROJECT))

from demo_server import DEMO_SITE, DemoServer, load_manifest  # noqa: E402
from testing import demo_server, run_crawl  # noqa: E402, F401 - demo_server is a fixture

MANIFEST = load_manifest()
GROUPS = {group["name"]: group for group in MANIFEST["groups"]}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def fetch(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    """GET without following redirects; HTTP errors are returned, not raised."""
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def manifest_hrefs() -> set[str]:
    hrefs = set()
    for group in MANIFEST["groups"]:
        for key in ("canonical", "page"):
            if key in group:
                hrefs.add(group[key])
        for key in ("variants", "pages", "links", "expected_fetch"):
            hrefs.update(group.get(key, []))
    return hrefs


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + ("?" + parts.query if parts.query else "")


def html_pages(server: DemoServer) -> dict[str, str]:
    """URL -> HTML of every page reachable by <a href> from / (a tiny crawler, same host:port only)."""
    seen, todo, pages = set(), [server.url + "/"], {}
    while todo:
        url = todo.pop()
        if url in seen:
            continue
        seen.add(url)
        status, headers, body = fetch(url)
        if status in (301, 302):
            todo.append(urljoin(url, headers["Location"]))
        if status != 200 or not headers["Content-Type"].startswith("text/html"):
            continue
        pages[url] = body.decode(headers["Content-Type"].split("charset=")[1].strip(), "replace").lstrip("\ufeff")
        for href in Selector(text=pages[url]).css("a::attr(href), area::attr(href)").getall():
            link = urljoin(url, href.strip()).split("#")[0]
            if link.startswith(server.url + "/"):
                todo.append(link)
    return pages


# --- the server ----------------------------------------------------------------------


def test_every_manifest_href_is_served(demo_server):
    redirects = {demo_server.url_for(src) for src in MANIFEST["redirects"]}
    for href in sorted(manifest_hrefs()):
        url = demo_server.url_for(href)
        status, headers, body = fetch(url)
        assert status == (301 if url in redirects else 200), href
        if status == 200:
            assert body and b"{{" not in body, href


def test_placeholders_are_filled(demo_server):
    status, headers, body = fetch(demo_server.url + "/docs/faq.html")
    html = body.decode()
    assert "{{" not in html
    assert f'href="HTTP://127.0.0.1:{demo_server.port}/articles/embeddings.html"' in html
    assert f'href="http://localhost:{demo_server.port}/index.html"' in html
    assert f'href="{demo_server.url}/docs/../docs/config.html"' in fetch(demo_server.url + "/docs/api.html")[2].decode()


@pytest.mark.parametrize("variant, same_as", [
    ("/articles/crawl-budget.html;jsessionid=ABC123", "/articles/crawl-budget.html"),
    ("/articles/crawl-budget.html?PHPSESSID=9f86d081884c7d65", "/articles/crawl-budget.html"),
    ("/docs/%61pi.html", "/docs/api.html"),
    ("/docs/../docs/config.html", "/docs/config.html"),
    ("/docs/guide", "/docs/guide/"),
    ("/docs/guide/index.html", "/docs/guide/"),
    ("/index.html", "/"),
    ("/mirror/articles/rag-pipelines.html", "/articles/rag-pipelines.html"),
    ("/downloads/harbor-whitepaper.pdf", "/files/harbor-whitepaper.pdf"),
    ("/shop/list.html?size=m&color=red&sort=price", "/shop/list.html"),
    ("/shop/list.html?color=red&page=2", "/shop/list.html?page=2"),
    ("/shop/product.html?id=2&ref=list&sort=price", "/shop/product.html?id=2"),
])
def test_variants_serve_identical_bytes(demo_server, variant, same_as):
    assert fetch(demo_server.url + variant)[2] == fetch(demo_server.url + same_as)[2]


def test_pages_that_must_differ(demo_server):
    bodies = {path: fetch(demo_server.url + path)[2] for path in GROUPS["distinct_pages"]["pages"]}
    assert len(set(bodies.values())) == len(bodies)


def test_link_header_redirect_and_charset(demo_server):
    (path, link), = MANIFEST["link_headers"].items()
    status, headers, _ = fetch(demo_server.url + path)
    assert headers["Link"] == f'<{demo_server.url}/articles/vector-search.html>; rel="canonical"'
    assert "Link" not in fetch(demo_server.url + "/articles/vector-search.html")[1]

    status, headers, body = fetch(demo_server.url + "/old-path.html")
    assert (status, headers["Location"], body) == (301, demo_server.url + "/new-path.html", b"")

    status, headers, body = fetch(demo_server.url + "/exact/meetup-latin1.html")
    assert headers["Content-Type"] == "text/html; charset=iso-8859-1"
    assert b'<meta charset="iso-8859-1">' in body and "Zürich".encode("iso-8859-1") in body
    assert body.decode("iso-8859-1").replace('"iso-8859-1"', '"utf-8"') == fetch(demo_server.url + "/exact/meetup.html")[2].decode()
    assert fetch(demo_server.url + "/exact/meetup-bom.html")[2].startswith(b"\xef\xbb\xbf")
    assert b"\r\n" in fetch(demo_server.url + "/exact/meetup-crlf.html")[2]


def test_content_types(demo_server):
    assert fetch(demo_server.url + "/files/harbor-whitepaper.pdf")[1]["Content-Type"] == "application/pdf"
    status, headers, body = fetch(demo_server.url + "/images/architecture.png")
    assert headers["Content-Type"] == "image/png" and body.startswith(b"\x89PNG\r\n\x1a\n")
    assert fetch(demo_server.url + "/files/harbor-whitepaper.pdf")[2].startswith(b"%PDF-1.4")


def test_conditional_get(demo_server):
    url = demo_server.url + "/docs/install.html"
    status, headers, body = fetch(url)
    etag, last_modified = headers["ETag"], headers["Last-Modified"]
    assert status == 200 and last_modified == MANIFEST["last_modified"]["v1"]
    status, headers, body = fetch(url, **{"If-None-Match": etag})
    assert (status, body, headers["ETag"]) == (304, b"", etag)
    assert fetch(url, **{"If-Modified-Since": last_modified})[0] == 304
    assert fetch(url, **{"If-Modified-Since": "Thu, 01 Feb 2024 00:00:00 GMT"})[0] == 200
    # If-None-Match wins over If-Modified-Since
    assert fetch(url, **{"If-None-Match": '"other"', "If-Modified-Since": last_modified})[0] == 200
    assert fetch(demo_server.url + "/docs/api.html", **{"If-None-Match": etag})[0] == 200


def test_v2_recrawl_variant(demo_server):
    recrawl = MANIFEST["recrawl"]
    v1 = {path: fetch(demo_server.url + path) for path in ["/", *recrawl["changed"], *recrawl["unchanged"]]}
    demo_server.variant = "v2"
    for path in recrawl["deleted_404"]:
        assert fetch(demo_server.url + path)[0] == 404
    for path in recrawl["gone_410"]:
        assert fetch(demo_server.url + path)[0] == 410
    for path in recrawl["changed"]:
        status, headers, body = fetch(demo_server.url + path, **{"If-None-Match": v1[path][1]["ETag"]})
        assert status == 200 and body != v1[path][2]
        assert headers["Last-Modified"] == MANIFEST["last_modified"]["v2"]
        assert fetch(demo_server.url + path, **{"If-Modified-Since": v1[path][1]["Last-Modified"]})[0] == 200
    for path in [*recrawl["unchanged"], "/"]:
        assert fetch(demo_server.url + path, **{"If-None-Match": v1[path][1]["ETag"]})[0] == 304
        assert fetch(demo_server.url + path)[2] == v1[path][2]
    # links to the deleted pages are still on the site in v2
    home = fetch(demo_server.url + "/")[2].decode()
    assert all(f'href="{path}"' in home for path in recrawl["deleted_404"] + recrawl["gone_410"])
    demo_server.variant = "v1"
    assert fetch(demo_server.url + recrawl["deleted_404"][0])[0] == 200


@pytest.mark.parametrize("path", ["/manifest.json", "/_v2/news/roadmap.html", "/.gitattributes",
                                  "/../demo_server.py", "/%2e%2e/demo_server.py", "/shop/product.html", "/nope.html"])
def test_hidden_missing_and_outside_paths_are_404(demo_server, path):
    assert fetch(demo_server.url + path)[0] == 404


def test_requests_are_recorded(demo_server):
    fetch(demo_server.url + "/docs/api.html?x=1")
    fetch(demo_server.url + "/docs/api.html?x=1")
    fetch(demo_server.url + "/old-path.html")
    assert demo_server.requests == ["/docs/api.html?x=1", "/docs/api.html?x=1", "/old-path.html"]
    assert demo_server.counts()["/docs/api.html?x=1"] == 2
    hit = demo_server.hits()[-1]
    assert (hit.method, hit.host, hit.status) == ("GET", f"127.0.0.1:{demo_server.port}", 301)
    demo_server.clear()
    assert demo_server.requests == []


def test_respond_without_network():
    server = DemoServer(port=8000)  # not started: respond() is pure
    reply = server.respond("/feeds/vector-search.html")
    assert reply.status == 200 and reply.headers["Link"].startswith("<http://127.0.0.1:8000/")
    assert server.respond("/docs/install.html", {"If-None-Match": reply.headers["ETag"]}).status == 200
    with pytest.raises(ValueError, match="variant"):
        DemoServer(variant="v3").respond("/")


def test_command_line_server():
    proc = subprocess.Popen([sys.executable, str(EXAMPLE_PROJECT / "demo_server.py"), "--port", "0", "--variant", "v2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        assert fetch(url + "news/legacy-api.html")[0] == 410
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.stderr.read() == ""  # quiet: no access log


# --- the site as the manifest describes it --------------------------------------------


def test_manifest_variants_are_linked_and_canonical_targets_are_not(demo_server):
    pages = html_pages(demo_server)
    links, canonicals = set(), {}
    for url, html in pages.items():
        selector = Selector(text=html)
        links.update(urljoin(url, href.strip()) for href in selector.css("a::attr(href), area::attr(href)").getall())
        canonicals[url] = selector.css('link[rel="canonical"]::attr(href)').get()
    unlinked = {g["canonical"] for g in MANIFEST["groups"] if g.get("target_linked") is False} | {"/"}
    for group in MANIFEST["groups"]:
        hrefs = [group.get("canonical"), *group.get("variants", []), *group.get("pages", []), *group.get("links", [])]
        for href in set(hrefs) - unlinked - {None}:
            assert demo_server.url_for(href) in links, (group["name"], href)
    for group in MANIFEST["groups"]:
        if group["kind"] == "rel_canonical":
            target = demo_server.url_for(group["canonical"])
            assert target not in links and target not in pages, group["name"]
            if group["source"] == "html":
                assert canonicals[demo_server.url_for(group["variants"][0])] == group["canonical"]
        if "canonical_href" in group:
            page = group.get("page", group["pages"][0])
            assert canonicals[demo_server.url_for(page)] == group["canonical_href"]
    for href in MANIFEST["off_site_links"]:
        assert demo_server.url_for(href) in links
    raw = "".join(pages.values())
    assert f"HTTP://127.0.0.1:{demo_server.port}/" in raw  # the upper-case scheme survives in the HTML


def test_demo_site_files_are_all_used():
    """Every shipped file is reachable through the manifest or a link (no stale fixtures)."""
    files = {p.relative_to(DEMO_SITE).as_posix() for p in DEMO_SITE.rglob("*") if p.is_file()}
    routed = {f.lstrip("/") for route in MANIFEST["query_routes"].values() for f in route["files"].values()}
    with DemoServer() as server:
        paths = {urlsplit(url).path for url in html_pages(server)}
        paths |= {urlsplit(server.url_for(href)).path for href in manifest_hrefs()}
    used = {path.lstrip("/") + ("index.html" if path.endswith("/") else "") for path in paths}
    assert not files - used - routed - {"manifest.json", ".gitattributes", "_v2/news/roadmap.html"}


# --- the spider -----------------------------------------------------------------------


def test_spider_requires_start_url():
    from demo_project.spiders.site import SiteSpider

    with pytest.raises(ValueError, match="start_url"):
        SiteSpider()
    with pytest.raises(ValueError, match="start_url"):
        SiteSpider(start_url="mailto:team@harbor.example")


def test_host_port():
    from demo_project.spiders.site import host_port

    assert host_port("HTTP://Example.COM/a") == ("example.com", 80)
    assert host_port("https://example.com/") == ("example.com", 443)
    assert host_port("http://127.0.0.1:8431/x?y#z") == ("127.0.0.1", 8431)
    assert host_port("http://example.com:80/") == host_port("http://example.com/")
    assert host_port("mailto:a@b.c") is None
    assert host_port("javascript:void(0)") is None
    assert host_port("http://example.com:port/") is None


def test_spider_follows_only_a_and_area_links_on_the_same_host_and_port():
    from demo_project.spiders.site import SiteSpider
    from scrapy.http import HtmlResponse, Request, Response

    spider = SiteSpider(start_url="http://127.0.0.1:8000/")
    html = b"""<html><head><title> Hello
      world </title><link rel="alternate" href="/feed.xml"><script src="/app.js"></script></head><body>
      <a href="/a.html">a</a> <a href="b.html?x=1">b</a> <area href="/c.html">
      <a href="HTTP://127.0.0.1:8000/d.html">d</a> <a href="http://127.0.0.1:8001/e.html">other port</a>
      <a href="http://localhost:8000/f.html">other host</a> <a href="https://127.0.0.1:8000/g.html">https</a>
      <a href="mailto:x@y.z">mail</a> <a href="javascript:void(0)">js</a> <img src="/h.png"></body></html>"""
    response = HtmlResponse("http://127.0.0.1:8000/dir/page.html", body=html, status=200)
    out = list(spider.parse(response))
    assert out[0] == {"url": "http://127.0.0.1:8000/dir/page.html", "title": "Hello world", "status": 200}
    assert [r.url for r in out[1:] if isinstance(r, Request)] == [
        "http://127.0.0.1:8000/a.html", "http://127.0.0.1:8000/dir/b.html?x=1", "http://127.0.0.1:8000/c.html",
        "http://127.0.0.1:8000/d.html", "https://127.0.0.1:8000/g.html"]  # scope = host:port, scheme-less
    pdf = Response("http://127.0.0.1:8000/x.pdf", headers={"Content-Type": "application/pdf"}, body=b"%PDF-1.4")
    assert list(spider.parse(pdf)) == [{"url": "http://127.0.0.1:8000/x.pdf", "content_type": "application/pdf"}]
    png = Response("http://127.0.0.1:8000/x.png", headers={"Content-Type": "image/png"}, body=b"\x89PNG")
    assert list(spider.parse(png)) == []


# --- a real crawl, plain Scrapy ----------------------------------------------------------


@pytest.fixture(scope="module")
def plain_crawl(tmp_path_factory):
    with DemoServer() as server:
        result = run_crawl(server.url + "/", tmp_path_factory.mktemp("plain"), dedup=False)
        yield server, result, server.hits()


def test_plain_crawl_finishes_cleanly(plain_crawl):
    server, result, hits = plain_crawl
    assert result.stats["finish_reason"] == "finished"
    assert isinstance(result.stats["finish_time"], str)  # datetimes dumped as ISO strings
    assert "log_count/ERROR" not in result.stats
    assert "downloader/exception_count" not in result.stats  # port 9 was never contacted
    assert not [key for key in result.stats if key.startswith("dedup/")]  # ADDONS={}: plain Scrapy
    assert result.stat("downloader/response_count") == len(hits)


def test_plain_crawl_stays_on_host_and_port(plain_crawl):
    server, result, hits = plain_crawl
    assert {hit.host for hit in hits} == {f"127.0.0.1:{server.port}"}  # the localhost link was not followed
    assert all(url.startswith(server.url + "/") for url in result.urls)
    assert "other.example.com" not in result.log and "/etc/passwd" not in result.log


def test_plain_crawl_yields_one_item_per_html_page(plain_crawl):
    server, result, hits = plain_crawl
    html_hits = sorted(hit.path for hit in hits if hit.status == 200 and hit.content_type.startswith("text/html"))
    html_items = [item for item in result.items if "title" in item]
    assert sorted(path_of(item["url"]) for item in html_items) == html_hits
    assert all(item["status"] == 200 and item["title"].endswith("| Harbor") for item in html_items)
    titles = {path_of(item["url"]): item["title"] for item in html_items}
    assert titles["/exact/meetup-latin1.html"] == "Notes from the Harbor user meetup in Zürich | Harbor"
    assert titles["/new-path.html"] == "Migrating from Harbor 2 to Harbor 3 | Harbor"  # reached also via the 301


def test_plain_crawl_binary_items(plain_crawl):
    server, result, hits = plain_crawl
    others = [item for item in result.items if "title" not in item]
    assert sorted(path_of(item["url"]) for item in others) == ["/downloads/harbor-whitepaper.pdf",
                                                               "/files/harbor-whitepaper.pdf"]
    assert {item["content_type"] for item in others} == {"application/pdf"}
    assert server.counts()["/images/architecture.png"] == 1  # linked with <a href>, fetched, no item


def test_plain_crawl_fetches_what_dedup_should_save(plain_crawl):
    """Without scrapy-dedup: canonical targets are never discovered and every facet variant is fetched."""
    server, result, hits = plain_crawl
    fetched = {hit.path for hit in hits}
    for name in ("rel_canonical_html", "rel_canonical_header"):
        assert GROUPS[name]["canonical"] not in fetched
    shop = {path for path in fetched if path.startswith("/shop/")}
    assert len(shop) > 3 * len(GROUPS["shop_facets"]["expected_fetch"])
    for name in ("tracking_params", "session_ids"):
        for variant in GROUPS[name]["variants"]:
            assert path_of(server.url_for(variant)) in fetched, variant


# --- run_demo.py (what `make demo` runs) -------------------------------------------------


def run_demo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLE_PROJECT / "run_demo.py"), "--port", "0", *args],
                          capture_output=True, text=True, timeout=300)


def test_run_demo_without_dedup(tmp_path):
    proc = run_demo("--no-dedup", "--items", str(tmp_path / "items.jsonl"))
    assert proc.returncode == 0, proc.stderr
    assert "pages fetched" in proc.stdout and "scrapy-dedup was disabled" in proc.stdout
    assert len((tmp_path / "items.jsonl").read_text().splitlines()) > 50


def test_run_demo_reports_a_failed_crawl(tmp_path):
    proc = run_demo("--items", str(tmp_path / "items.jsonl"), "-s", 'ADDONS={"no_such_module.Addon": 1}')
    assert proc.returncode == 1
    assert "demo failed: ModuleNotFoundError" in proc.stderr
