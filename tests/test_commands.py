"""``scrapy dedup``: every subcommand, run as a real CLI against a store of a real crawl.

The demo site is crawled once per session (its store is read by every test);
each test runs ``python -m scrapy dedup ...`` in a subprocess and checks the
records against the duplicates planted in demo_site/manifest.json.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

import pytest
from testing import DemoServer, run_crawl

from scrapy_dedup.core.fingerprints import shingle_jaccard
from scrapy_dedup.core.urls import normalize_url, url_key
from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.records import get_text

ALIAS_FIELDS = ["url", "canonical_url", "reason", "distance", "first_seen", "last_seen"]
PROVENANCE_FIELDS = [
    "url", "key", "canonical_url", "status", "reason", "content_hash", "simhash", "cluster_id",
    "http_status", "first_seen", "last_seen", "fetch_count", "text_length",
]
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
#: the reason a planted duplicate of each kind must be listed with
KIND_REASON = {
    "url_variant": "url_variant",
    "exact_content": "exact_content",
    "binary_exact": "exact_content",
    "near_duplicate": "near_duplicate",
    "rel_canonical": "rel_canonical",
    "redirect": "redirect",
}


class Demo:
    def __init__(self, server: DemoServer, store: Path) -> None:
        self.server = server
        self.manifest = server.manifest
        self.host_rules = server.manifest["host_rules"]
        self.store = store

    def url(self, href: str) -> str:
        return self.server.url_for(href)

    def key(self, url: str) -> str:
        return url_key(url, self.host_rules)


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """The demo site, crawled once; the server keeps running for --fetch-text."""
    work = tmp_path_factory.mktemp("demo-crawl")
    with DemoServer() as server:
        run_crawl(server.url + "/", work, {"DEDUP_HOST_RULES": server.manifest["host_rules"]})
        yield Demo(server, work / "store")


@pytest.fixture(scope="session")
def outside(tmp_path_factory):
    """A working directory that is not inside any Scrapy project."""
    return tmp_path_factory.mktemp("outside")


def dedup(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("SCRAPY_SETTINGS_MODULE", "COLUMNS", "LINES")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def ok(*args: str, cwd: Path, env: dict | None = None) -> str:
    proc = dedup(*args, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture(scope="session")
def provenance(demo, outside) -> dict[str, dict]:
    rows = jsonl(ok("provenance", "--store", str(demo.store), "--format", "jsonl", cwd=outside))
    return {row["url"]: row for row in rows}


@pytest.fixture(scope="session")
def aliases(demo, outside) -> list[dict]:
    return jsonl(ok("aliases", "--store", str(demo.store), "--format", "jsonl", cwd=outside))


def find(provenance: dict[str, dict], url: str) -> dict | None:
    """The store's record of a URL as the site wrote it (some spellings only reach it normalized)."""
    return provenance.get(url) or provenance.get(normalize_url(url))


# -- the records ------------------------------------------------------------------------


def test_each_planted_duplicate_has_its_reason_and_canonical(demo, provenance, aliases):
    by_alias = {row["url"]: row for row in aliases}
    checked = 0
    for group in demo.manifest["groups"]:
        if group["expect"] != "one_document":
            continue
        urls = [demo.url(group["canonical"])] + [demo.url(v) for v in group["variants"]]
        rows = {u: find(provenance, u) for u in urls}
        assert all(rows.values()), f"{group['name']}: not in the store: {[u for u, r in rows.items() if not r]}"
        canonicals = {row["canonical_url"] for row in rows.values()}
        assert len(canonicals) == 1, f"{group['name']}: one document, several canonicals: {canonicals}"
        canonical = canonicals.pop()
        canonical_row = provenance[canonical]
        assert canonical_row["reason"] is None and canonical_row["canonical_url"] == canonical
        if group["kind"] in ("rel_canonical", "redirect"):
            assert canonical == demo.url(group["canonical"]), group["name"]
        else:  # the representative rule picks one of the group's URLs
            assert demo.key(canonical) in {demo.key(u) for u in urls}, group["name"]
        for url, row in rows.items():
            if row["url"] == canonical:
                # a spelling that Scrapy or the normalizer turned into the canonical URL itself
                assert normalize_url(url) == canonical or url == canonical, (group["name"], url)
                continue
            if demo.key(row["url"]) == demo.key(canonical):
                expected = "url_variant"
            elif group["kind"] in ("exact_content", "near_duplicate", "binary_exact"):
                same = row["content_hash"] == canonical_row["content_hash"]
                expected = "exact_content" if same else "near_duplicate"
            else:
                expected = KIND_REASON[group["kind"]]
            assert row["reason"] == expected, (group["name"], url, row)
            alias = by_alias[row["url"]]
            assert alias["canonical_url"] == canonical and alias["reason"] == expected, (group["name"], alias)
            assert (alias["distance"] is not None) == (expected == "near_duplicate"), alias
            checked += 1
    assert checked >= 30
    near = [a for a in aliases if a["reason"] == "near_duplicate"]
    assert near and all(isinstance(a["distance"], int) and a["distance"] >= 0 for a in near)


def test_separate_documents_stay_canonical(demo, provenance):
    for group in demo.manifest["groups"]:
        if group["expect"] != "separate_documents":
            continue
        canonicals = [find(provenance, demo.url(page))["canonical_url"] for page in group["pages"]]
        assert len(set(canonicals)) == len(canonicals), (group["name"], canonicals)
    mismatch = find(provenance, demo.url("/blog/page2.html"))
    assert mismatch["reason"] is None and mismatch["canonical_url"] == mismatch["url"]


def test_facet_links_are_url_variants_of_the_allowed_combinations(demo, provenance, aliases):
    group = next(g for g in demo.manifest["groups"] if g["name"] == "shop_facets")
    allowed = {demo.key(demo.url(href)) for href in group["expected_fetch"]}
    variants = {a["url"] for a in aliases if a["reason"] == "url_variant"}
    for href in group["links"]:
        row = find(provenance, demo.url(href))
        assert row is not None, href
        assert demo.key(row["canonical_url"]) in allowed, (href, row["canonical_url"])
        assert row["url"] in variants or row["reason"] is None, (href, row)


def test_aliases_are_exactly_the_non_canonical_urls(provenance, aliases):
    assert sorted(a["url"] for a in aliases) == sorted(u for u, r in provenance.items() if r["reason"])
    for alias in aliases:
        assert list(alias) == ALIAS_FIELDS
        assert alias["canonical_url"] and alias["canonical_url"] != alias["url"]
        assert ISO.match(alias["first_seen"]) and ISO.match(alias["last_seen"])
        assert alias["first_seen"] <= alias["last_seen"]


def test_provenance_jsonl_has_exactly_the_fields(provenance):
    statuses = set()
    for row in provenance.values():
        assert list(row) == PROVENANCE_FIELDS
        statuses.add(row["status"])
        assert ISO.match(row["first_seen"]), row
        if row["simhash"] is not None:
            assert re.fullmatch(r"[0-9a-f]{16}", row["simhash"]), row
        if row["content_hash"] is not None:
            assert row["cluster_id"] and row["http_status"] == 200 and row["fetch_count"] >= 1
    assert {"new", "exact_duplicate", "redirect", "dropped"} <= statuses


def test_csv_parses_with_the_same_records(demo, outside, provenance, aliases):
    for command, fields, expected in (("aliases", ALIAS_FIELDS, aliases), ("provenance", PROVENANCE_FIELDS, None)):
        text = ok(command, "--store", str(demo.store), "--format", "csv", cwd=outside)
        reader = csv.DictReader(io.StringIO(text))
        assert reader.fieldnames == fields
        rows = list(reader)
        expected = expected if expected is not None else list(provenance.values())
        assert [r["url"] for r in rows] == [e["url"] for e in expected]
        assert [r["reason"] or None for r in rows] == [e["reason"] for e in expected]


def test_aliases_filters(demo, outside, aliases):
    out = ok("aliases", "--store", str(demo.store), "--format", "jsonl", "--reason", "redirect",
             "--reason", "rel_canonical", cwd=outside)
    rows = jsonl(out)
    wanted = ("redirect", "rel_canonical")
    assert sorted(r["url"] for r in rows) == sorted(a["url"] for a in aliases if a["reason"] in wanted)
    assert {r["url"]: r["canonical_url"] for r in rows} == {
        demo.url("/old-path.html"): demo.url("/new-path.html"),
        demo.url("/partners/agent-memory.html"): demo.url("/articles/agent-memory.html"),
        demo.url("/feeds/vector-search.html"): demo.url("/articles/vector-search.html"),
    }
    host = ok("aliases", "--store", str(demo.store), "--format", "jsonl", "--host", "127.0.0.1", cwd=outside)
    assert len(jsonl(host)) == len(aliases)
    other = ok("aliases", "--store", str(demo.store), "--format", "jsonl", "--host", "example.com", cwd=outside)
    assert other == ""
    # the table says there is none, with the filters asked for, and prints no header above it
    table = ok("aliases", "--store", str(demo.store), "--host", "example.com", cwd=outside)
    assert table == "no alias for --host example.com\n"
    both = ok("aliases", "--store", str(demo.store), "--host", "example.com", "--reason", "redirect", cwd=outside)
    assert both == "no alias for --host example.com --reason redirect\n"


def test_table_is_aligned_and_fits_the_terminal(demo, outside, aliases):
    wide = ok("aliases", "--store", str(demo.store), cwd=outside).splitlines()
    assert wide[0] == f"(URLs on {demo.server.url})"
    assert wide[1].split() == ALIAS_FIELDS and len(wide) == len(aliases) + 2
    column = wide[1].index("canonical_url")
    for line in wide[2:]:
        assert line.startswith("/") and line[column - 2:column] == "  " and line[column] == "/", line
    narrow = ok("aliases", "--store", str(demo.store), cwd=outside, env={"COLUMNS": "80"}).splitlines()
    assert len(narrow) == len(wide) and max(map(len, narrow)) <= 80
    assert narrow[1].split() == ["url", "canonical_url", "reason", "distance"]


@pytest.mark.smoke
def test_summary_counts_by_kind(demo, outside, provenance, aliases):
    counts = json.loads(ok("summary", "--store", str(demo.store), "--format", "jsonl", cwd=outside))
    reasons = [a["reason"] for a in aliases]
    assert counts["urls_known"] == len(provenance)
    assert counts["aliases"] == len(aliases)
    for reason in ("url_variant", "redirect", "rel_canonical", "exact_content", "near_duplicate"):
        assert counts[f"aliases/{reason}"] == reasons.count(reason)
    # exact or near: a URL with content against its document's representative (the canonical)
    rep_hash = {r["cluster_id"]: r["content_hash"] for r in provenance.values() if r["url"] == r["canonical_url"]}
    copies = [
        r for r in provenance.values()
        if r["content_hash"] and r["url"] != r["canonical_url"] and r["reason"] not in ("url_variant", "redirect")
    ]
    exact = sum(r["content_hash"] == rep_hash.get(r["cluster_id"]) for r in copies)
    assert (counts["exact_duplicates"], counts["near_duplicates"]) == (exact, len(copies) - exact)
    assert counts["documents"] == len({r["cluster_id"] for r in provenance.values() if r["content_hash"]})
    assert counts["canonical_mismatches"] == 1
    assert counts["dropped_before_fetch"] == reasons.count("url_variant")
    host = demo.server.url.split("://")[1]
    assert counts[f"host/{host}/duplicates"] == len(copies)  # URLs with content only
    assert 0 < counts[f"host/{host}/duplicate_rate"] < 1
    table = ok("summary", "--store", str(demo.store), cwd=outside)
    assert "Duplicate rate per host" in table and re.search(rf"{re.escape(host)}\s+\d+\s+\d+\s+\d+\s+\d+\.\d%", table)
    metrics = csv.DictReader(io.StringIO(ok("summary", "--store", str(demo.store), "--format", "csv", cwd=outside)))
    assert {m["metric"]: m["value"] for m in metrics}["documents"] == str(counts["documents"])


def test_summary_says_its_urls_never_fetched_are_url_variants(demo, outside):
    """The summary counts the URL variants (other spellings of a URL fetched, never fetched as
    written) and their requests over all runs; the crawl log's "N requests dropped before fetch"
    counts every request its run dropped, a repeated link too. The summary said "dropped before
    fetch" as the log does, for another number (39 URLs / 164 requests against 1,093 on the demo)."""
    counts = json.loads(ok("summary", "--store", str(demo.store), "--format", "jsonl", cwd=outside))
    table = ok("summary", "--store", str(demo.store), cwd=outside)
    variants = counts["dropped_before_fetch"]
    requests = sum(n for k, n in counts.items() if k.startswith("dropped_requests/"))
    seen = f"fetched or redirected, {variants} URL variants: other spellings, never fetched as written"
    assert re.search(rf"^URLs seen +\d+ +\d+ {seen}$", table, re.M), table
    line = re.search(r"^  URL variants +(\d+) +(.*)$", table, re.M)
    assert line and int(line[1]) == variants and line[2].endswith("(the requests of these spellings, over all runs)")
    assert sum(int(n) for n in re.findall(r"/ (\d+) requests", line[2])) == requests
    assert "dropped before fetch" not in table
    logged = re.findall(r"dedup: (\d+) requests dropped before fetch", (demo.store.parent / "crawl.log").read_text())
    assert int(logged[-1]) > requests  # not the same count


# -- lookup ---------------------------------------------------------------------------------


@pytest.mark.smoke
def test_lookup_of_a_tracking_variant_names_its_canonical(demo, outside):
    url = demo.url("/articles/llm-evals.html?utm_source=newsletter&utm_medium=email")
    answer = json.loads(ok("lookup", url, "--store", str(demo.store), "--format", "jsonl", cwd=outside))
    assert answer["known"] and answer["canonical_url"] == demo.url("/articles/llm-evals.html")
    assert answer["reason"] == "url_variant" and answer["normalized_url"] == demo.url("/articles/llm-evals.html")
    same = {m["url"]: m["reason"] for m in answer["same_document"]}
    assert same[demo.url("/articles/llm-evals.html")] is None
    assert same[url] == "url_variant"
    table = ok("lookup", url, "--store", str(demo.store), cwd=outside)
    assert f"canonical_url  {demo.url('/articles/llm-evals.html')}\n" in table
    assert "reason         url_variant\n" in table
    # a fragment is no tracking parameter: the note names what normalization dropped
    table = ok("lookup", demo.url("/articles/llm-evals.html#results"), "--store", str(demo.store), cwd=outside)
    assert "url_variant: normalized before any request (fragment," in table


def test_lookup_says_why_each_url_variant_was_not_fetched_as_written(demo, outside):
    """A variant's note follows the reason its record keeps: a `normalized` one was requested
    under its normalized URL, not dropped; it said "already scheduled" of every variant."""
    from crawl_helpers import StoreView

    by_reason = {variant["reason"]: url for url, variant in StoreView(demo.store).variants.items()}
    assert {"seen", "normalized"} <= set(by_reason), by_reason
    notes = {
        "seen": ("dropped before fetch ", " time(s): its URL key was already scheduled"),
        "normalized": ("never fetched as written: requested ", " time(s) under its normalized URL"),
    }
    for reason, (opening, ending) in notes.items():
        answer = json.loads(ok("lookup", by_reason[reason], "--store", str(demo.store), "--format", "jsonl", cwd=outside))
        note = answer["path"][0]["note"]
        assert note.startswith(opening) and note.endswith(ending), (reason, note)


def test_lookup_of_a_suppressed_copy_lists_every_url_of_its_document(demo, outside, provenance):
    url = demo.url("/print/rag-pipelines.html")
    answer = json.loads(ok("lookup", url, "--store", str(demo.store), "--format", "jsonl", cwd=outside))
    assert answer["canonical_url"] == demo.url("/articles/rag-pipelines.html")
    assert answer["reason"] == "exact_content" and answer["status"] == provenance[url]["status"]
    same = {m["url"]: m["reason"] for m in answer["same_document"]}
    assert same[demo.url("/articles/rag-pipelines.html")] is None
    assert same[demo.url("/mirror/articles/rag-pipelines.html")] == "exact_content"
    assert same[url] == "exact_content"
    expected = {u for u, r in provenance.items() if r["canonical_url"] == answer["canonical_url"]}
    assert set(same) == expected
    redirect = json.loads(ok("lookup", demo.url("/old-path.html"), "--store", str(demo.store), "--format", "jsonl",
                             cwd=outside))
    assert redirect["reason"] == "redirect" and redirect["canonical_url"] == demo.url("/new-path.html")


def test_lookup_of_an_unknown_url(demo, outside):
    answer = json.loads(ok("lookup", demo.url("/never/linked.html"), "--store", str(demo.store), "--format",
                           "jsonl", cwd=outside))
    assert answer["known"] is False and answer["canonical_url"] is None
    assert "not known to the store" in ok("lookup", demo.url("/never/linked.html"), "--store", str(demo.store),
                                          cwd=outside)


# -- clusters, calibrate, report ------------------------------------------------------------


def test_clusters_members_representative_and_distance(demo, outside, provenance):
    clusters = jsonl(ok("clusters", "--store", str(demo.store), "--format", "jsonl", cwd=outside))
    assert clusters and all(c["size"] >= 2 for c in clusters)
    for c in clusters:
        assert list(c) == ["cluster_id", "size", "representative", "max_distance", "members"]
        members = {m["url"]: m for m in c["members"]}
        assert len(members) == c["size"]
        assert members[c["representative"]]["reason"] is None
        assert c["max_distance"] == max(m["distance"] or 0 for m in c["members"])
        for url in members:
            assert provenance[url]["cluster_id"] == c["cluster_id"]
            assert provenance[url]["canonical_url"] == c["representative"]
    near = next(c for c in clusters if demo.url("/near/release-3-2-date.html") in {m["url"] for m in c["members"]})
    assert near["size"] == 4 and near["max_distance"] > 0
    # the Jaccard shown is the one the merge was decided on, the kept texts', not a MinHash estimate
    with LevelDBStore.open_existing(str(demo.store)) as store:
        rep_text = get_text(store, demo.key(near["representative"]))
        for m in near["members"]:
            exact = shingle_jaccard(get_text(store, demo.key(m["url"])), rep_text)
            assert m["jaccard"] == round(exact, 3)
    top = jsonl(ok("clusters", "--store", str(demo.store), "--format", "jsonl", "--top", "1", cwd=outside))
    assert [c["size"] for c in top] == [max(c["size"] for c in clusters)]
    big = jsonl(ok("clusters", "--store", str(demo.store), "--format", "jsonl", "--min-size", "4", cwd=outside))
    # none that large: said with the size asked for (it said "no cluster of that size", also when
    # no size was given and no document had a second URL)
    none = ok("clusters", "--store", str(demo.store), "--min-size", "1000", cwd=outside)
    assert none == "no cluster of 1,000 URLs or more\n"
    assert [c["cluster_id"] for c in big] == [c["cluster_id"] for c in clusters if c["size"] >= 4]
    rows = list(csv.DictReader(io.StringIO(ok("clusters", "--store", str(demo.store), "--format", "csv",
                                              cwd=outside))))
    assert len(rows) == sum(c["size"] for c in clusters)
    table = ok("clusters", "--store", str(demo.store), cwd=outside)
    assert table.count("\ncluster ") + table.startswith("cluster ") == len(clusters) and "kept: " in table


def test_boilerplate_of_a_crawl_without_any_says_so_in_one_line(tmp_path, outside):
    """A complete crawl with DEDUP_CHUNKS whose pages share no line: ``boilerplate`` says so in one
    line, as ``clusters`` says it found none; it printed an empty table's header."""
    from crawl_helpers import crawled_page

    page = "<html><head><title>Alone</title></head><body><article>" + "".join(
        f"<p>Paragraph {n} of the only page: the words of section {n} and nothing else.</p>" for n in range(5)
    ) + "</article></body></html>"
    crawled_page(page, tmp_path, {"DEDUP_CHUNKS": True})
    store = str(tmp_path / "store")
    none = ("no line is boilerplate: none is on at least the larger of DEDUP_BOILERPLATE_MIN_PAGES pages and "
            "DEDUP_BOILERPLATE_SHARE of its group's pages")
    proc = dedup("boilerplate", "--store", store, cwd=outside)
    assert proc.returncode == 0 and proc.stdout == none + "\n" and not proc.stderr, proc
    host = "127.0.0.1"
    assert ok("boilerplate", "--store", store, "--host", host, cwd=outside) == none.replace(":", f" of {host}:", 1) + "\n"
    # csv and jsonl keep their form (a header, nothing); the line goes to stderr
    proc = dedup("boilerplate", "--store", store, "--format", "csv", cwd=outside)
    assert proc.stdout.splitlines() == ["group,pages,group_pages,threshold,example_url,text,key"]
    assert proc.stderr == f"scrapy dedup: {none}\n"
    assert ok("boilerplate", "--store", store, "--format", "jsonl", cwd=outside) == ""


def test_kept_names_the_rule_of_the_representative_order_that_chose():
    """``clusters`` says why its representative was kept: the first rule of the representative
    order on which it beats the runner-up."""
    from scrapy_dedup.core.records import Cluster, UrlRecord
    from scrapy_dedup.reports.clusters import why_kept

    def kept(rep: dict, runner: dict, authority: tuple[str, ...] = ()) -> str:
        a = UrlRecord("http://h/a", "http://h/a", **{"text_length": 100, "first_run": 1} | rep)
        b = UrlRecord("http://h/b", "http://h/b", **{"text_length": 100, "first_run": 1} | runner)
        cluster = Cluster("c", "", "", 0, 0)
        cluster.represent(a)
        return why_kept(cluster, [b, a], authority)

    assert kept({}, {"canonical_alias": True}) == "the other copies declared a rel=canonical"
    assert kept({}, {}, ("*/a",)) == "most authoritative source (DEDUP_AUTHORITY)"
    assert kept({"text_length": 90}, {"plain_text": True}).startswith("extracted from HTML")
    assert kept({"text_length": 120}, {}) == "longest text (120 characters, next 100)"
    assert kept({}, {"first_run": 2}) == "known since an earlier crawl run (1)"
    assert kept({}, {}) == "same text length: the smallest URL"
    assert kept({"plain_text": True}, {}) == "representative (chosen under other settings)"


def test_calibrate_samples_pairs_around_the_threshold(demo, outside):
    clusters = jsonl(ok("clusters", "--store", str(demo.store), "--format", "jsonl", cwd=outside))
    k = 3
    in_range = {
        (m["url"], c["representative"])
        for c in clusters
        for m in c["members"]
        if m["reason"] is not None and m["distance"] is not None and k - 2 <= m["distance"] <= k + 3
    }
    pairs = jsonl(ok("calibrate", "--store", str(demo.store), "--format", "jsonl", "--sample", "10", cwd=outside))
    for p in pairs:
        assert list(p) == ["distance", "jaccard", "merged", "url", "other_url", "diff"]
        # k-2..k+3, and a near duplicate merged farther (merged on its Jaccard whatever the distance)
        assert k - 2 <= p["distance"] <= k + 3 or p["merged"], p
        assert 0 <= p["jaccard"] <= 1
        assert isinstance(p["diff"], str)  # the crawl kept the texts
    merged = {(p["url"], p["other_url"]) for p in pairs if p["merged"]}
    assert in_range <= merged
    beyond = {
        (m["url"], c["representative"])
        for c in clusters
        for m in c["members"]
        if m["reason"] == "near_duplicate" and m["distance"] > k + 3
    }
    assert beyond and beyond <= merged  # the demo's release note with a date, at distance 7
    # with the texts kept, a pair's Jaccard is theirs (the one it was decided on), not an estimate
    with LevelDBStore.open_existing(str(demo.store)) as store:
        for p in pairs:
            exact = shingle_jaccard(get_text(store, demo.key(p["url"])), get_text(store, demo.key(p["other_url"])))
            assert p["jaccard"] == round(exact, 3), p
    for p in pairs:
        if (p["url"], p["other_url"]) in in_range and p["jaccard"] < 1:
            assert "[-" in p["diff"] or "{+" in p["diff"]
    table = ok("calibrate", "--store", str(demo.store), cwd=outside)
    assert table.startswith(f"Near-duplicate threshold k = {k}")
    assert [line.split()[0] for line in table.splitlines()[4:10]] == [str(d) for d in range(k - 2, k + 4)]
    # the Jaccard columns are the sampled pairs', and the table says how many those are
    one = ok("calibrate", "--store", str(demo.store), "--sample", "1", cwd=outside).splitlines()
    header = one[3].split()
    assert header[:5] == ["distance", "vs_k", "pairs", "merged", "sampled"]
    for line in one[4:10]:
        _, _, _, pairs, _, sampled, *_ = line.split()  # vs_k is "<= k" or "> k": two words
        assert int(sampled) == min(1, int(pairs))


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs


def test_report_is_one_self_contained_page(demo, outside, tmp_path):
    out = tmp_path / "report.html"
    proc = dedup("report", "--store", str(demo.store), "--html", str(out), cwd=outside)
    assert proc.returncode == 0, proc.stderr
    page = out.read_text("utf-8")
    parser = _Tags()
    parser.feed(page)
    assert "script" not in parser.tags and "link" not in parser.tags and "img" not in parser.tags
    assert not [v for k, v in parser.attrs if k == "src"] and "url(" not in page and "@import" not in page
    assert parser.tags.count("svg") >= 3
    for title in ("Summary", "Near duplicates by Hamming distance", "Cluster sizes", "Duplicate rate per host",
                  "Largest clusters", "Calibration sample"):
        assert title in page
    assert demo.url("/near/release-3-2-extra.html") in page and "<del>" in page


def test_fetch_text_diffs_the_pages_as_served_now(demo):
    from scrapy_dedup.reports.diff import word_diff
    from scrapy_dedup.reports.texts import Texts

    with LevelDBStore.open_existing(str(demo.store)) as store:
        texts = Texts(store, fetch=True)
        fetched = texts.fetch_text(demo.url("/near/release-3-2-date.html"))
        stored = get_text(store, demo.key(demo.url("/near/release-3-2-date.html")))
    assert fetched and stored and word_diff(stored, fetched) == []
    assert Texts(store, fetch=True).fetch_text(demo.url("/never/linked.html")) is None


# -- finding the store, exit codes, a crawl holding the store -------------------------------


@pytest.mark.smoke
def test_usage_errors_exit_2(demo, outside):
    store = ["--store", str(demo.store)]
    for args in (
        [],
        ["bogus", *store],
        ["summary"],
        ["aliases", "--reason", "bogus", *store],
        ["lookup", *store],
        ["lookup", "not a url", *store],
        ["aliases", "--min-size", "2", *store],
        ["summary", "--html", "x.html", *store],
        ["report", *store],
        ["clusters", "--top", "0", *store],
        ["summary", "--unknown-option", *store],
    ):
        proc = dedup(*args, cwd=outside)
        assert proc.returncode == 2, (args, proc.returncode, proc.stderr)
        assert "error:" in proc.stderr and "Traceback" not in proc.stderr, args


def test_unreadable_store_exits_1_with_one_line(outside, tmp_path):
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "CURRENT").write_text("MANIFEST-000009\n")
    cases = ((tmp_path / "missing", "no dedup store at"), (garbage, "CURRENT points to a non-existent file"))
    for path, message in cases:
        proc = dedup("summary", "--store", str(path), cwd=outside)
        assert proc.returncode == 1 and proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("scrapy dedup: ") and message in proc.stderr
    proc = dedup("report", "--store", str(garbage.parent / "missing"), "--html", str(tmp_path / "r.html"), cwd=outside)
    assert proc.returncode == 1 and not (tmp_path / "r.html").exists()


def test_store_from_the_project_settings_and_spider_name(demo, tmp_path):
    project = tmp_path / "project"
    (project / "proj").mkdir(parents=True)
    (project / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    (project / "proj" / "__init__.py").write_text("")
    (project / "proj" / "settings.py").write_text('BOT_NAME = "proj"\n')
    shutil.copytree(demo.store, project / ".scrapy" / "dedup" / "site")
    expected = json.loads(ok("summary", "--store", str(demo.store), "--format", "jsonl", cwd=tmp_path))
    by_spider = json.loads(ok("summary", "--spider", "site", "--format", "jsonl", cwd=project))
    assert by_spider["urls_known"] == expected["urls_known"] and by_spider["documents"] == expected["documents"]
    by_setting = ok("summary", "-s", f"DEDUP_STORE={demo.store}", "--format", "jsonl", cwd=project)
    assert json.loads(by_setting)["aliases"] == expected["aliases"]
    proc = dedup("summary", "--spider", "other", cwd=project)
    assert proc.returncode == 1 and "no dedup store at" in proc.stderr and "other" in proc.stderr
    # the demo project: its settings, its spider, the store named on the command line
    example = Path(__file__).resolve().parent.parent / "example_project"
    in_demo = ok("aliases", "--spider", "site", "-s", f"DEDUP_STORE={demo.store}", "--format", "jsonl", cwd=example)
    assert len(jsonl(in_demo)) == expected["aliases"]


def _one_spider_project(project: Path, name: str = "site", settings: str = "") -> Path:
    """A Scrapy project in ``project`` with one spider, ``name``, and ``settings`` added to its
    settings.py; returns the directory of its spiders."""
    (project / "proj" / "spiders").mkdir(parents=True)
    (project / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    (project / "proj" / "__init__.py").write_text("")
    (project / "proj" / "settings.py").write_text('BOT_NAME = "proj"\nSPIDER_MODULES = ["proj.spiders"]\n' + settings)
    spiders = project / "proj" / "spiders"
    (spiders / "__init__.py").write_text("")
    (spiders / "site.py").write_text(f'import scrapy\n\n\nclass Site(scrapy.Spider):\n    name = "{name}"\n')
    return spiders


def test_a_project_with_one_spider_reads_its_store_without_naming_it(demo, tmp_path):
    project = tmp_path / "project"
    spiders = _one_spider_project(project)
    shutil.copytree(demo.store, project / ".scrapy" / "dedup" / "site")
    expected = json.loads(ok("summary", "--store", str(demo.store), "--format", "jsonl", cwd=tmp_path))
    alone = json.loads(ok("summary", "--format", "jsonl", cwd=project))
    assert alone["urls_known"] == expected["urls_known"] and alone["documents"] == expected["documents"]
    # two spiders: which store is not guessed, and the message names them
    (spiders / "other.py").write_text('import scrapy\n\n\nclass Other(scrapy.Spider):\n    name = "other"\n')
    proc = dedup("summary", cwd=project)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--spider NAME" in proc.stderr and "this project's spiders: other, site" in proc.stderr
    # outside a project, the store must be named
    outside = dedup("summary", cwd=tmp_path)
    assert outside.returncode == 2 and "say which store to read" in outside.stderr
    assert "this project's spiders" not in outside.stderr


def test_a_project_with_one_spider_reads_its_redis_store_without_naming_it(redis_single, tmp_path):
    """The Redis URL in settings.py, as the several-processes guide has it: the crawl's keys are
    under dedup:<spider name>, and the project's only spider names them."""
    name = f"site{uuid.uuid4().hex[:10]}"
    project = tmp_path / "project"
    _one_spider_project(project, name, f"DEDUP_STORE = {redis_single.url!r}\n")
    pages = tmp_path / "pages.jsonl"
    text = "The same page of text under two URLs, long enough to be kept as one document of the crawl."
    pages.write_text("".join(json.dumps({"url": f"https://a.example/{n}", "text": text}) + "\n" for n in (1, 2)))
    ok("ingest", str(pages), "--store", redis_single.url, "--redis-prefix", f"dedup:{name}", cwd=tmp_path)
    alone = json.loads(ok("summary", "--format", "jsonl", cwd=project))
    assert alone["urls_known"] == 2 and alone["documents"] == 1
    assert "settled 2 documents in 1 clusters" in ok("settle", cwd=project)
    assert [record["url"] for record in jsonl(ok("export", cwd=project))] == ["https://a.example/1"]
    # two spiders: which crawl is not guessed
    (project / "proj" / "spiders" / "other.py").write_text(
        'import scrapy\n\n\nclass Other(scrapy.Spider):\n    name = "other"\n')
    proc = dedup("summary", cwd=project)
    assert proc.returncode == 1 and proc.stderr.startswith("scrapy dedup: say which crawl to read on the Redis server")


def test_a_locked_store_is_read_from_a_snapshot(demo, outside):
    expected = ok("summary", "--store", str(demo.store), "--format", "jsonl", cwd=outside)
    with LevelDBStore.open_existing(str(demo.store)):  # holds LevelDB's lock, as a crawl does
        proc = dedup("summary", "--store", str(demo.store), "--format", "jsonl", cwd=outside)
        assert proc.returncode == 0
        # the same store, read while its holder runs
        assert json.loads(proc.stdout) == {**json.loads(expected), "frontier": "running"}
        assert "a running crawl holds" in proc.stderr and "snapshot" in proc.stderr
        refused = dedup("summary", "--store", str(demo.store), "--no-snapshot", cwd=outside)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "in use by a running crawl" in refused.stderr


def test_reading_during_a_crawl(demo, outside, tmp_path):
    """Reads while a crawl writes: each one succeeds on a snapshot, never a traceback."""
    result: list = []
    crawl = threading.Thread(
        target=lambda: result.append(
            run_crawl(demo.server.url + "/", tmp_path, {"DEDUP_HOST_RULES": demo.host_rules, "DOWNLOAD_DELAY": 0.05})
        )
    )
    crawl.start()
    reads = []
    while crawl.is_alive():
        if (tmp_path / "store" / "CURRENT").exists():
            reads.append(dedup("aliases", "--store", str(tmp_path / "store"), "--format", "jsonl", cwd=outside))
        else:
            time.sleep(0.05)
    crawl.join()
    assert result and reads
    during = [r for r in reads if "a running crawl holds" in r.stderr]
    assert during, [r.stderr for r in reads]
    for read in reads:
        assert read.returncode == 0 and "Traceback" not in read.stderr, read.stderr
        for row in jsonl(read.stdout):
            assert list(row) == ALIAS_FIELDS and row["canonical_url"]
    final = jsonl(ok("aliases", "--store", str(tmp_path / "store"), "--format", "jsonl", cwd=outside))
    assert len(final) >= max(len(jsonl(r.stdout)) for r in reads)


def test_reports_on_a_running_crawl_say_it_runs(demo, outside, tmp_path):
    """summary and export read a first crawl's store while it runs: they name the store, say its
    run is under way (not interrupted) and that the crawl settles it, not `scrapy dedup settle`
    (which a held store refuses)."""
    store = tmp_path / "store"
    result: list = []
    crawl = threading.Thread(
        target=lambda: result.append(
            run_crawl(demo.server.url + "/", tmp_path, {"DEDUP_HOST_RULES": demo.host_rules, "DOWNLOAD_DELAY": 0.15})
        )
    )
    crawl.start()  # slow enough for several reads while it holds the store, on a loaded machine too
    summaries, exports, changes = [], [], []
    reads = (
        ("summary", "--store", str(store)),
        ("export", "--store", str(store), "-o", str(tmp_path / "out.jsonl")),
        ("export", "--store", str(store), "--changes-since", "0-0"),
    )
    with ThreadPoolExecutor(len(reads)) as pool:
        while crawl.is_alive():
            if not (store / "CURRENT").exists():
                time.sleep(0.05)
                continue
            # the three at once: one after the other, only the first read while the crawl held
            # the store when the machine was loaded (each command takes 1.5 to 3 s)
            summary, export, change = pool.map(lambda args: dedup(*args, cwd=outside), reads)
            summaries.append(summary)
            exports.append(export)
            changes.append(change)
    crawl.join()
    assert result
    held = [r for r in summaries if "a running crawl holds" in r.stderr]
    assert held, [r.stderr for r in summaries]
    for read in held:
        assert read.returncode == 0, read.stderr
        assert read.stdout.startswith(f"store  {store}\n"), read.stdout
        assert "last run running: " in read.stdout and "interrupted" not in read.stdout, read.stdout
    held = [r for r in exports + changes if "a running crawl holds" in r.stderr]
    for read in held:
        # never the advice to settle, which a held store refuses; a snapshot is either not settled
        # yet (export again later), or settled as the crawl closes (a change token), or taken
        # before any page of text was decided (the PDF alone: nothing to export)
        assert "dedup settle" not in read.stderr, read.stderr
        outcomes = ("export again when the crawl ends", "change token", "nothing to export")
        assert any(outcome in read.stderr for outcome in outcomes), read.stderr
    assert any("export again when the crawl ends" in r.stderr for r in held), [r.stderr for r in held]
    assert "interrupted" not in ok("summary", "--store", str(store), cwd=outside)


def test_summary_of_a_run_killed_before_it_owed_a_request_says_interrupted(outside, tmp_path):
    """A crawl killed while its start page is fetched owes nothing (a start request is not owed)
    and never closed: the summary said "last run complete" of it."""
    import signal

    from local_site import LocalSite
    from testing import EXAMPLE_PROJECT

    asked, release = threading.Event(), threading.Event()

    def reply(path: str):
        asked.set()
        release.wait(60)
        return 200, {}, b"<html><body><p>late</p></body></html>"

    store = tmp_path / "store"
    with LocalSite(reply) as site:
        cmd = [sys.executable, "-m", "scrapy", "crawl", "site", "-a", f"start_url={site.url}/", "-s", f"DEDUP_STORE={store}"]
        env = dict(os.environ, SCRAPY_SETTINGS_MODULE="demo_project.settings", PYTHONPATH=str(EXAMPLE_PROJECT))
        crawl = subprocess.Popen(cmd, cwd=EXAMPLE_PROJECT, env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            assert asked.wait(60), "the crawl never asked for its start page"
        finally:
            os.killpg(crawl.pid, signal.SIGKILL)
            crawl.wait(30)
            release.set()
    summary = ok("summary", "--store", str(store), cwd=outside)
    assert "last run interrupted: it stopped before it closed\n" in summary, summary
    counts = json.loads(ok("summary", "--store", str(store), "--format", "jsonl", cwd=outside))
    assert counts["frontier"] == "interrupted" and counts["pending"] == 0, counts


def test_help_lists_the_command_inside_and_outside_a_project(outside):
    example = Path(__file__).resolve().parent.parent / "example_project"
    for cwd in (outside, example):
        listing = subprocess.run(
            [sys.executable, "-m", "scrapy"], cwd=cwd, capture_output=True, text=True, timeout=60
        ).stdout
        assert re.search(r"^\s+dedup\s+Inspect the dedup store", listing, re.M), cwd
        help_text = ok("--help", cwd=cwd)
        for subcommand in ("summary", "aliases", "provenance", "lookup", "clusters", "calibrate", "report"):
            assert subcommand in help_text


def test_help_renders_every_option_as_written(outside):
    """Scrapy's formatter made a heading of any help line that wrapping ended in ':'; every
    option's help must read as the parser has it, at any terminal width and for every subcommand."""
    from scrapy.settings import Settings

    from scrapy_dedup.commands.dedup import SUBCOMMANDS, Command

    parser, command = argparse.ArgumentParser(), Command()
    command.settings = Settings()
    command.add_options(parser)
    helps = [" ".join(a.help.split()) for a in parser._actions if a.help and a.help != argparse.SUPPRESS]
    assert any("default: DEDUP_REDIS_PREFIX" in h for h in helps)
    runs = [(("--help",), width) for width in ("60", "80", "100", "140")]
    runs += [((name, "--help"), "80") for name in SUBCOMMANDS]
    for args, width in runs:
        out = ok(*args, cwd=outside, env={"COLUMNS": width})
        flat = " ".join(out.split())
        for text in helps:
            assert text in flat, (args, width, text)
        lines = out.splitlines()
        for above, line in zip(lines, lines[1:]):
            if line and set(line) <= {"=", "-"}:  # an underline: only under a heading at the margin
                assert not above.startswith(" "), (args, width, above)


def test_summary_gives_the_error_answers_of_urls_without_a_document(tmp_path, outside):
    """A URL fetched without a document is most often a broken link: the summary names the
    error statuses its count holds."""
    from scrapy_dedup.core.records import UrlRecord

    path = tmp_path / "store"
    with LevelDBStore(str(path), {"test": 1}) as store, store.batch() as batch:
        for n, answer in enumerate((404, 404, 410, 200)):
            batch.put_url(UrlRecord(f"http://h/{n}", f"http://h/{n}", status="fetched", http_status=answer))
        batch.put_url(UrlRecord("http://h/", "http://h/", status="hub", http_status=200))
    shown = ok("summary", "--store", str(path), cwd=outside)
    assert re.search(r"^Not documents\s+5\s+hub 1, fetched 4 \(HTTP 404: 2; 410: 1\)$", shown, re.M), shown
    metrics = ok("summary", "--store", str(path), "--format", "jsonl", cwd=outside)
    assert '"http_error/404": 2' in metrics and '"http_error/410": 1' in metrics, metrics
    assert "http_error/200" not in metrics


def test_chunk_reports_of_a_store_without_chunks_say_how_to_get_them(demo, outside):
    # the demo is crawled without DEDUP_CHUNKS; boilerplate is learned from the chunks, which a
    # user asking for it alone could not know from "the store keeps no chunks"
    for command, words in (("chunks", "keeps no chunks"), ("boilerplate", "boilerplate lines are learned from them")):
        proc = dedup(command, "--store", str(demo.store), cwd=outside)
        assert proc.returncode == 1 and words in proc.stderr and "DEDUP_CHUNKS = True" in proc.stderr, proc.stderr
