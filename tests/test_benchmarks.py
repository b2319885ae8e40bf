"""The benchmark scripts keep working: each runs at ``--size tiny`` in a subprocess and writes
well-formed JSON with sane values. No timing is asserted (timings are the scripts' output, and
noise on a shared machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
ROW_KEYS = {"benchmark", "measure", "scrapy_dedup", "alternatives", "ratio", "target", "met"}

sys.path.insert(0, str(BENCH))


def run(script: str, out: Path, *args: str, timeout: float = 300) -> dict:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--size", "tiny", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    name = script.removeprefix("bench_").removesuffix(".py")
    data = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    assert data["benchmark"] == name
    assert data["machine"]["cores"] >= 1 and data["machine"]["python"]
    assert data["rows"], "no table rows"
    for r in data["rows"]:
        assert set(r) == ROW_KEYS
        assert r["met"] in (True, False, None)
    return data


@pytest.fixture(scope="module")
def corpus():
    """Real pages for the speed scripts: the demo site's, so that no test depends on a download."""
    import _corpus

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(_corpus.PAGES_ENV, str(ROOT / "example_project" / "demo_site"))
        yield _corpus.docs_root()


def test_fingerprints(tmp_path, corpus):
    data = run("bench_fingerprints.py", tmp_path)
    res = data["results"]
    assert res["docs_compared"] > 0 and res["mb_compared"] > 0
    for impl in ("scrapy_dedup", "reference", "trafilatura"):
        assert res["simhash"][impl]["docs_per_s"] > 0
        assert res["simhash"][impl]["mb_per_s"] > 0
    assert res["exact_hash"]["mb_per_s"] > 0
    assert res["ratio_vs_reference"] > 0 and res["ratio_vs_trafilatura"] > 0


def test_reference_simhash_is_a_simhash():
    from bench_fingerprints import reference_simhash

    from scrapy_dedup.core.fingerprints import hamming

    base = " ".join(f"w{i}" for i in range(400))
    near = base.replace("w200", "changed")
    other = " ".join(f"v{i}" for i in range(400))
    assert hamming(reference_simhash(base), reference_simhash(near)) <= 6
    assert hamming(reference_simhash(base), reference_simhash(other)) > 10


def test_index(tmp_path):
    # a small L1 makes the packed prototype flush to LevelDB at this size
    data = run("bench_index.py", tmp_path, "--n", "3000", "--packed-l1", "1024")
    runs = data["runs"]
    configs = {r["config"] for r in runs}
    assert {"store", "packed", "probe", "linear", "tables"} <= configs
    for r in runs:
        # a planted query shares 4 - d blocks with its source: (4 + 3 + 2 + 1 + 0) / 5 at least
        assert r["candidates"]["mean"] >= 2 and r["candidates"]["expected"] == 4 * 3000 / 65536
        assert r["n"] == 3000
        # the tables guarantee every planted near duplicate within distance 3
        assert all(r["recall"][str(d)] == 1.0 for d in range(4)), (r["config"], r["recall"])
        assert r["random_query_hits"] == 0
        assert r["insert_docs_per_s"] > 0 and r["lookups"] > 0
        assert 0 < r["lookup_ms"]["p50"] <= r["lookup_ms"]["p99"]
        assert (r["disk_bytes"] > 0) == (r["config"] in ("store", "packed", "probe"))
    assert next(r for r in runs if r["config"] == "store")["generations"] is not None


def test_soak(tmp_path):
    data = run("bench_soak.py", tmp_path, "--pages", "400", timeout=600)
    assert data["pages"] == 400 and set(data["runs"]) == {"dedup", "scrapy", "store"}
    for mode, r in data["runs"].items():
        # every distinct page fetched once; plain Scrapy fetches the start page again from a
        # link (its start request, dont_filter, is not in its dupefilter's set)
        assert r["responses"] == {"dedup": 400, "scrapy": 401, "store": 400}[mode] and not r["errors"]
        assert r["end"]["responses"] == 400 and r["warm"]["responses"] < r["end"]["responses"]
        # VmRSS is private memory plus mapped files (plus shared memory): each is sampled
        assert all(s["rss"] >= s["anon"] + s["file"] and s["anon"] > 0 for s in r["samples"])
        assert r["growth_anon_mb_per_1e5"] is not None and r["growth_file_mb_per_1e5"] is not None
    # the target judges private memory; VmRSS is reported beside it, for both crawls
    measures = [r["measure"] for r in data["rows"]]
    for label in ("scrapy-dedup", "plain Scrapy"):
        assert any("RssAnon" in m and m.endswith(label) for m in measures)
        assert any("VmRSS" in m and m.endswith(label) for m in measures)


def test_longlived(tmp_path):
    data = run("bench_longlived.py", tmp_path, "--n", "2000", "--queries", "200")
    assert data["n"] == 2000 and data["runs"] == 5
    results = data["results"]
    assert set(results) == {"aged", "aged_no_compaction", "fresh"}
    for r in results.values():
        assert r["recall"] == 1.0
        assert 0 < r["lookup_cpu_ms"]["p50"] <= r["lookup_cpu_ms"]["p99"]
    # compaction leaves the aged store holding what a fresh one holds
    assert results["aged"]["kept_bytes_per_doc"] <= 1.05 * results["fresh"]["kept_bytes_per_doc"]
    assert results["aged_no_compaction"]["kept_bytes_per_doc"] > 1.5 * results["fresh"]["kept_bytes_per_doc"]


def test_packed_prototype_survives_a_restart(tmp_path):
    """Layout A keeps its newest documents in memory: the write-ahead keys must rebuild them."""
    import numpy as np
    from bench_index import PackedIndex, fingerprints

    class Small(PackedIndex):
        L0_MAX, L1_MAX = 64, 512

    fps = fingerprints(3050)  # 5 flushes of 600, then 50 documents in memory
    path = str(tmp_path / "db")
    index = Small(path, batch=100)
    for start in range(0, len(fps), 100):
        index.insert(fps[start : start + 100], start)
    assert index.gen > 0 and index.l1_n + index.l0_n > 0  # some flushed, some in memory
    index.close()
    index = Small(path, batch=100)
    assert all(index.near(int(fps[i])) == [i] for i in range(0, len(fps), 11))
    assert index.near(int(fps[5] ^ np.uint64(0b111))) == [5]
    index.close()


def test_crawl(tmp_path, corpus):
    data = run("bench_crawl.py", tmp_path, timeout=600)
    cost = data["results"]["cost"]
    assert set(cost["arms"]) == {"pool_full", "pool_project", "dedup", "dedup_chunks"}
    (site,) = cost["summary"].values()
    for arm, s in site["arms"].items():
        assert s["pages"] > 1 and s["pages_per_s"] > 0 and s["items"] > 0, arm
        assert s["cpu_per_page_ms"] > 0, arm
        assert not cost["runs"][next(iter(cost["runs"]))][arm][0]["errors"], arm
    # the same pages on either side of each comparison (the extension may fetch a rel=canonical
    # target the spider never linked: the demo site has some)
    arms = site["arms"]
    assert arms["pool_full"]["pages"] == arms["pool_project"]["pages"] <= arms["dedup"]["pages"]
    assert arms["dedup"]["pages"] == arms["dedup_chunks"]["pages"]
    assert {"defaults_vs_pool_full", "chunks_vs_pool_full", "defaults_vs_pool_project"} <= set(site["ratios"])
    assert "| site |" in (tmp_path / "crawl_cost.md").read_text(encoding="utf-8")
    fetches = data["results"]["fetches"]
    runs = fetches["runs"]
    assert 0 < runs["dedup"]["fetches"] < runs["raw"]["fetches"]
    assert runs["raw"]["fetches"] == runs["pool_full"]["fetches"]
    assert len(runs["raw"]["distinct_docs"]) == fetches["layout"]["distinct_documents"]
    assert fetches["lost_documents"] == []
    for mode in ("raw", "pool_full", "dedup"):
        assert not runs[mode]["errors"], runs[mode]["errors"]


def test_bands(tmp_path):
    data = run("bench_bands.py", tmp_path, "--n", "3000", "--queries", "40")
    runs = {r["config"]: r for r in data["runs"]}
    assert set(runs) == {"store", "store-simhash-only", "per-key"}
    for config in ("store", "per-key"):
        # every planted document shares one band with its query: found by either layout
        assert runs[config]["recall"] == 1.0, config
    for r in runs.values():
        assert r["n"] == 3000 and r["insert_docs_per_s"] > 0 and r["disk_bytes_per_doc"] > 0
        assert 0 < r["lookup_ms"]["p50"] <= r["lookup_ms"]["p99"]


def test_frontier(tmp_path):
    data = run("bench_frontier.py", tmp_path)
    for config in ("rfp", "dedup"):
        r = data["runs"][f"{config}/3000"]
        assert r["dropped"] == r["expected_dropped"] > 0
        assert r["memory"]["peak_rss"] > 0
    assert data["runs"]["dedup/3000"]["dupefilter"] == "DedupDupeFilter"
    assert data["runs"]["rfp/3000"]["dupefilter"] == "RFPDupeFilter"


def test_diversify(tmp_path, corpus):
    data = run("bench_diversify.py", tmp_path)
    speed = data["results"]["speed"]
    for case in ("50", "50+emb", "1000", "50 with 20 copies", "50, pairwise near_match", "50, canonical_text alone",
                 "50, batch canonical text alone", "50 as extracted", "1000 as extracted"):
        assert 0 < speed[case]["best_ms"] <= speed[case]["median_ms"] <= speed[case]["p90_ms"]
        assert speed[case]["cpu_median_ms"] >= 0
    for size in ("50", "1000"):  # where the time goes, stage by stage
        stages = speed["stages"][size]
        assert set(stages) == {"read_canonical_hash", "features_candidates", "fingerprints_near_match",
                               "rank_exact_merge_output"}
        assert stages["read_canonical_hash"] > 0 and all(v >= 0 for v in stages.values())
    quality = data["results"]["quality"]
    assert quality["passages"] > 0 and quality["answered"] > 0
    before, after = quality["top5"]["before"], quality["top5"]["after"]
    # three copies of every page: BM25 alone fills its top 5 with them, diversify does not
    assert before["dups_rule"] > 0 and after["dups_rule"] < before["dups_rule"]
    assert after["slots"] <= before["slots"]
    assert 0 < quality["best_kept"] <= 1 and quality["best_same_passage"] <= quality["best_kept"]


def test_redis(tmp_path, corpus):
    data = run("bench_redis.py", tmp_path, timeout=900)
    frontier = data["frontier"]
    for impl in ("ours", "scrapy_redis"):
        assert frontier[impl]["bytes_per_url"] > 0
        assert frontier[impl]["one_by_one_per_s"] > 0 and frontier[impl]["bulk_per_s"] > 0
    assert [r["servers"] for r in data["near"]] == ["1 server", "3 masters"]
    for r in data["near"]:
        assert r["cluster"] == (r["servers"] == "3 masters")
        assert r["decisions"] > 0 and 0 < r["kept"] < r["decisions"]
        assert 0 < r["latency_ms"]["p50"] <= r["latency_ms"]["p99"]
        # a decision reads its buckets with plain HMGETs (not counted) and a kept one enters
        # itself with one call per table: at most four calls
        assert 0 < r["commands_per_decision"] <= 4 and r["busiest_master_us_per_decision"] > 0
        single = r["one_at_a_time"]
        assert single["decisions"] > 0 and 0 < single["commands_per_decision"] <= 4
        if r["cluster"]:
            assert r["busiest_master_share"] < 0.6  # spread over the three masters
        # the deciding processes' own CPU, and the machine's ceiling it gives with the servers'
        assert r["client_cpu_us_per_decision"] > 0 and r["cores"] >= 1
        assert r["server_cpu_us_per_decision"] > 0
    if data["datasketch"] is not None:
        assert data["datasketch"]["bytes_per_document"] > 0
    store_time = data["store_time"]
    assert store_time["extract_ms"] > 0 and store_time["redis_store_ms"] > 0 and store_time["server_calls_per_page"] > 0
    # what the client sends per page, and where the bytes are: one call per band group, not per band
    assert 0 < store_time["round_trips_per_page"] < store_time["client_commands_per_page"] < 120
    assert store_time["bytes_by_family"]["b"]["keys"] > 0 and store_time["bytes_per_document_by_family"]["t:url"] > 0
    # the band buckets are fields of one hash per band group
    assert store_time["bytes_by_family"]["b"]["keys"] <= 8
    for count, index in store_time["index_bytes"].items():
        assert index["documents"] == int(count) and index["band_lookup_server_us"] > 0
        assert index["bytes_by_family"]["b"]["bytes"] > 12 * 32 * index["documents"]  # 32 records of 12 bytes each
    assert set(store_time["band_bucket_cost_us"]) == {"12", "14", "16"}
    # the round trips are part of the pass's wall time, not all of it
    assert 0 < store_time["round_trip_ms"] < store_time["redis_store_ms"]
    # distinct documents: each is its own cluster, with its text, signature and band records
    many = store_time["document_bytes"]["1000"]
    assert many["documents"] == 1_000
    assert many["bytes_per_document_by_family"]["t:minhash"] > 256  # a signature of 256 one-byte slots
    assert many["bytes_per_document_by_family"]["b"] > 12 * 32  # 32 band records of 12 bytes
    assert 0 < many["bytes_per_document_without_texts"] < many["bytes_per_document"]
    assert "s:members" not in many["bytes_by_family"]  # a cluster of one has no member set
    # the site crawled by 1, 2 and 4 processes over one Redis store: each ends as one process on LevelDB
    assert set(data["crawls"]) == {"leveldb, 1 process", "redis, 1 process", "redis, 2 processes", "redis, 4 processes"}
    for label, crawl in data["crawls"].items():
        assert crawl["pages_per_s"] > 0 and crawl["rounds_pages_per_s"] == [crawl["pages_per_s"]]  # one round
        if label != "leveldb, 1 process":
            assert crawl["same_result_as_leveldb"], label
            assert crawl["bytes_per_document_everything"] > 0
            # each fetch takes the queue's pop and push and the store's calls: several round trips
            assert 1 < crawl["round_trips_per_page"] < crawl["server_calls_per_page"], label
            # the crawl processes timed their round trips: the store's and the queue's, told apart
            assert crawl["store_round_trip_ms_per_page"] > 0 and crawl["queue_round_trip_ms_per_page"] > 0, label
            assert 0 < crawl["store_round_trip_share_of_wall"] < 1 and crawl["store_replies_per_fetch"] > 1, label
    rows = {r["measure"] for r in data["rows"]}
    assert any("machine-bound ceiling" in m for m in rows) and any("in the crawl processes" in m for m in rows)


def test_redis_bytes_alone_keeps_the_other_counts(tmp_path):
    """``--only bytes`` measures the given counts and keeps the figures of the others."""
    run("bench_redis.py", tmp_path, "--only", "bytes", "--docs", "200")
    data = run("bench_redis.py", tmp_path, "--only", "bytes", "--docs", "300")
    measured = data["store_time"]["document_bytes"]
    assert sorted(measured) == ["200", "300"] and measured["300"]["documents"] == 300
    families = measured["300"]["bytes_by_family"]
    # the small tables keep digests: 8-byte cluster ids and 12-byte digests against 16-hex and 32-hex text
    assert 0 < families["t:exact"]["bytes"] < families["t:raw"]["bytes"]
    assert [r["measure"].split(" distinct")[0] for r in data["rows"] if r["measure"].startswith("bytes per document at")] == [
        "bytes per document at 200", "bytes per document at 200", "bytes per document at 300", "bytes per document at 300"]


def test_run_all_merges_and_renders(tmp_path):
    """run_all.py over one cheap script: latest.json, latest.md, and the README left alone."""
    readme_before = (BENCH / "README.md").read_text(encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run_all.py"), "--size", "tiny", "--only", "frontier", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    latest = json.loads((tmp_path / "latest.json").read_text(encoding="utf-8"))
    assert latest["size"] == "tiny" and "frontier" in latest["benchmarks"]
    table = (tmp_path / "latest.md").read_text(encoding="utf-8")
    assert "| benchmark | measure | scrapy-dedup |" in table and "frontier" in table
    assert "| benchmark | measure |" in proc.stdout
    assert (BENCH / "README.md").read_text(encoding="utf-8") == readme_before


def test_missing_comparison_package_is_reported(tmp_path, monkeypatch):
    import run_all

    monkeypatch.setitem(run_all.COMPARISON_PACKAGES, "surely-not-installed", "surely_not_installed_module")
    assert "surely-not-installed" in run_all.missing_packages()


def test_markdown_table_escapes_cells():
    import run_all

    md = run_all.markdown_table([run_all.row("b", "a|b", "1", "2", "3x", "t", False)])
    assert "a\\|b" in md and "**no**" in md


def test_chunks(tmp_path):
    data = run("bench_chunks.py", tmp_path)
    site = data["results"]["sites"]["demo"]
    by_cap = site["chunks"]["by_cap"]
    assert set(by_cap) == {"100", "150", "200", "300", "400"}
    assert by_cap["100"]["chunks"] >= by_cap["400"]["chunks"] > 0  # a smaller cap never makes fewer chunks
    assert site["boilerplate"]["pages"] > 0 and site["boilerplate"]["paragraphs"] > 0
    assert (tmp_path / "chunks.md").read_text(encoding="utf-8").startswith("# Chunks and boilerplate")


def test_export(tmp_path):
    data = run("bench_export.py", tmp_path)
    res = data["results"]
    assert res["documents"] == 2_000
    assert res["export"]["docs"] == res["plain"]["docs"] == 2_000
    assert res["export"]["seconds"] > 0 and res["export"]["peak_anon_mb"] >= 0


def test_ingest(tmp_path, corpus):
    data = run("bench_ingest.py", tmp_path)
    runs = data["results"]["runs"]
    assert set(runs) == {"text", "html", "html, 2 workers"}
    pages = data["results"]["pages"]
    for r in runs.values():
        assert r["records"] == pages > 0 and r["documents_per_s"] > 0
        assert sum(r["statuses"].values()) == pages
    # the same pages end in the same decisions whichever way they came in
    assert runs["text"]["statuses"] == runs["html"]["statuses"] == runs["html, 2 workers"]["statuses"]


def test_rag(tmp_path):
    data = run("bench_rag.py", tmp_path)
    site = data["results"]["sites"]["demo"]
    assert site["pages"] > site["chunks"]["documents"] > 0  # the demo site has exact and near copies
    assert site["chunks"]["chunks"] == sum(site["chunks"]["statuses"].values()) > 0
    assert 0 <= site["chunks"]["share_duplicate_of_other_document"] <= 1
    bp = site["boilerplate"]
    ours = bp["this extension (defaults)"]
    assert ours["unique_removed_chars"] == 0  # a paragraph on one page is never boilerplate
    for order in ("url order", "reverse url order"):
        traf = bp[f"trafilatura deduplicate=True, {order}"]
        assert traf["chars"] == ours["chars"] > 0 and 0 <= traf["removed_share"] <= 1
    costs = site["costs"]
    assert costs["extract_ms_per_page"] > 0 and costs["heading_spans_ms_per_page"] > 0
    assert costs["heading_spans_found"] > 0  # the demo pages keep their headings in <main>/<article>
    chunking = costs["chunking"]
    assert chunking["with heading spans"]["chunks"] > 0 and chunking["without heading spans"]["chunks"] > 0
    assert data["notes"]  # CJK needs downloads: said, not silently skipped
    assert (tmp_path / "rag.md").read_text(encoding="utf-8").startswith("# RAG corpus measures")


def _quality_run(script: str, out: Path) -> dict:
    proc = subprocess.run([sys.executable, str(BENCH / script), "--size", "tiny", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    name = script.removesuffix(".py")
    assert (out / f"{name}.md").read_text(encoding="utf-8").startswith("#")
    return json.loads((out / f"{name}.json").read_text(encoding="utf-8"))


def test_quality(tmp_path):
    """The quality script on the demo site's pages, taken as both releases: every page pairs with
    its identical copy, and the edited copies near J = 1 are found while unrelated pages are not."""
    import _corpus

    pages = len(_corpus.html_pages(ROOT / "example_project" / "demo_site"))
    data = _quality_run("quality.py", tmp_path)
    truth = data["ground_truth"]
    assert truth["real_pages"] == 2 * pages and truth["edited_pages"] > 0
    assert truth["identical_pairs"] >= pages - truth["excluded_short_real"] // 2
    for shipped in (data["shipped"], data["shipped_exact_check"]):
        assert shipped["edited"]["J>=0.9"]["pairs"] > 0 and shipped["edited"]["J>=0.9"]["rate"] >= 0.9
        assert shipped["real"]["J<0.5"]["pairs"] > 0 and shipped["real"]["J<0.5"]["rate"] <= 0.001
    assert data["grid"] and data["min_tokens_sweep"] and data["tokenizer"]
    assert "speed" not in data and "extraction" not in data  # tiny skips the timings


def test_quality_code(tmp_path):
    data = _quality_run("quality_code.py", tmp_path)
    assert data["size"] == "tiny" and data["pages"]["edited"] > 0
    for label, per_definition in data["results"].items():
        assert set(per_definition) == {"words", "words+marks", "attached"}, label
        words = per_definition["words"]
        assert words["edited"]["J>=0.9"]["pairs"] > 0 and words["edited"]["J>=0.9"]["rate"] >= 0.9, label
        assert words["real"]["J<0.5"]["rate"] <= 0.001, label


def test_settle(tmp_path):
    data = run("bench_settle.py", tmp_path)
    res = data["results"]
    assert res["build"]["docs"] == res["first"]["docs"] == res["again"]["docs"] == res["full"]["docs"] == 2_000
    assert res["first"]["revised"] > 0 and res["again"]["revised"] == res["again"]["rewritten"] == 0
    # a full settle of a settled store changes nothing; an incremental one after 1% more reaches some
    assert res["full"]["affected"] == 2_000 and res["full"]["rewritten"] == 0
    assert res["again"]["affected"] == 0 and 0 < res["after"]["affected"] < res["after"]["docs"] == 2_020
    assert res["first"]["cpu_s"] > 0 and res["changed"]["docs"] == 20
    assert {r["benchmark"] for r in data["rows"]} == {"settle"}


def test_extraction(tmp_path):
    """The extraction benchmark on the demo site's pages (its real sites need downloads)."""
    proc = subprocess.run([sys.executable, str(BENCH / "bench_extraction.py"), "--size", "tiny", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "extraction.json").read_text(encoding="utf-8"))
    (site,) = data["sites"]
    assert site["pages"] > 0 and site["kept"]["shipped"]["min"] >= 0.9
    assert site["kept"]["shipped"]["words_min"] >= 0.9 and site["kept"]["shipped"]["words_under_0.9"] == 0
    assert site["pairs"]["classes"]["J>=0.9"]["pairs"] > 0
    assert [r["benchmark"] for r in data["rows"]] == ["extraction"] * 4
    assert (tmp_path / "extraction.md").read_text(encoding="utf-8").startswith("# Extraction")


def test_merge(tmp_path):
    """Merge without loss on the demo site's pages: every line a merged page has and its
    representative lacks is in export --chunks, and nothing the representative has twice."""
    data = run("bench_merge.py", tmp_path)
    (site,) = data["sites"].values()
    assert site["merged_documents"] > 0 and site["unique_chars"] > site["retrievable_before"]
    assert site["retrievable_after"] == site["unique_chars"] and site["counted_twice_chars"] == 0


def test_latency_proxy_adds_a_millisecond(redis_single):
    """The latency benchmark's relay really puts the server further away (about 1 ms per
    round trip, 0.5 ms each way) and passes everything through unchanged."""
    import redis
    from latency_proxy import LatencyProxy, ping_ms

    with LatencyProxy("127.0.0.1", redis_single.port, 0.0005) as proxy:
        direct, proxied = ping_ms(redis_single.url), ping_ms(proxy.url)
        assert proxied - direct >= 0.8, (direct, proxied)
        client = redis.Redis.from_url(proxy.url)
        value = bytes(range(256)) * 1000  # larger than one chunk
        client.set("bench:latency-proxy", value)
        assert client.get("bench:latency-proxy") == value
        assert client.delete("bench:latency-proxy") == 1
        client.close()
    assert proxy.chunks_up >= 200  # each PING went up as a chunk of its own


def test_latency(tmp_path, corpus):
    data = run("bench_latency.py", tmp_path, timeout=600)
    assert data["rtt"]["added_ms"] >= 0.8 and data["rtt"]["direct_ms"] > 0
    zero, one = data["summary"]["0 ms"], data["summary"]["+1 ms"]
    for arm in (zero, one):
        assert arm["pages_per_s"] > 0 and arm["cpu_ms_per_page"] > 0
        # the store's round trips: seen by the server, and waited for in the crawl process
        assert arm["round_trips_per_page"] > 1 and arm["reactor_replies_per_page"] > 0
    # the +1 ms crawl talked to Redis through the relay, the 0 ms one directly
    assert one["proxy_chunks_per_page"] > 1 and zero["proxy_chunks_per_page"] == 0
    assert data["ratio"] == pytest.approx(one["pages_per_s"] / zero["pages_per_s"])
    assert len(data["runs"]["0 ms"]) == len(data["runs"]["+1 ms"]) == data["rounds"] == 1
    assert data["load_average"]["max"] >= data["load_average"]["min"] >= 0
