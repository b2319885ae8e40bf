"""Settling a store: documents/s per core, memory, and the incremental settle's share of a crawl.

    .venv/bin/python benchmarks/bench_settle.py --size default            # 2 x 10^4 documents, LevelDB
    .venv/bin/python benchmarks/bench_settle.py --size large              # 10^6 documents, LevelDB
    .venv/bin/python benchmarks/bench_settle.py --docs 200000 --backend redis

The store is written directly (no crawl: that would take hours at 10^6), with the structure
online decisions leave: families of near-duplicate texts of 300 words from a vocabulary of
20,000, a quarter of the documents founding a family and every document (founders too) its
family's words with 0 to 7 of them replaced at random (so two members may be further apart
than each is from the founder: chains, and pages near several others). Each document is
fingerprinted with :func:`~scrapy_dedup.core.fingerprints.fingerprint`, its text kept (as
``DEDUP_KEEP_TEXT``, the default, keeps it: pairs are then decided on their exact Jaccard), and
it is placed provisionally in its family's cluster, which its founder represents and indexes.

Then, each in a process of its own: the first settle (every document), a second one
(incremental, nothing decided since), a full one of the settled store, then 1% more documents (edited copies of earlier ones)
decided online through ``ContentIndex.ingest``, and an incremental settle after them.
Reported: CPU time (user + system, ``getrusage``: a shared machine disturbs it far less than
wall time), documents/s per core of the full settle, peak private memory above the start of
the settling process, and the incremental settle's CPU against the crawl CPU of the same pages
(``results/crawl.json``: CPU ms per page of a crawl with dedup on the PostgreSQL docs). On
Redis the server's CPU (``INFO cpu``) is counted with the client's.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from scrapy_dedup.store.records import (
    add_member,
    get_minhash,
    get_text,
    get_url,
    index_exact,
    index_raw,
    put_cluster,
    put_minhash,
    put_text,
)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

from run_all import MemoryWatch, fmt, log, row, run_child, write_result  # noqa: E402

NAME = "settle"
RESULTS = HERE / "results"
SIZES = {"tiny": 2_000, "default": 20_000, "large": 1_000_000}
SETTINGS = {"max_distance": 3, "min_jaccard": 0.8, "min_tokens": 50}
WORDS, VOCABULARY, MAX_EDITS = 300, 20_000, 8
#: the issue's targets: a full settle per core, and the incremental settle against the crawl
TARGET_RATE = 5_000
TARGET_SHARE = 0.05
#: share of the store decided again before the incremental settle
CHANGED = 0.01
#: CPU ms per page of a crawl with dedup, when results/crawl.json is not there (bench_crawl, 400
#: PostgreSQL doc pages, extraction in the crawl process)
CRAWL_CPU_MS = 19.8
REDIS_PREFIX = "bench:settle"
#: a full settle of the store once settled too (the first one writes most clusters again) up to this size
FULL_AGAIN_UP_TO = 1_000_000


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def crawl_cpu_ms() -> tuple[float, str]:
    """CPU ms per page of a crawl with dedup (bench_crawl's last result)."""
    try:
        summary = json.loads((RESULTS / "crawl.json").read_text())["results"]["overhead"]["summary"]
        return float(summary["dedup"]["cpu_per_page_ms"]), "results/crawl.json"
    except (OSError, KeyError, ValueError):
        return CRAWL_CPU_MS, "bench_crawl's figure in docs/benchmarks.md"


def open_store(location: str, backend: str, create: bool = False):
    if backend == "redis":
        from scrapy_dedup.store.redis.store import RedisStore

        if create:
            return RedisStore(location, {"bench": NAME}, prefix=REDIS_PREFIX)
        return RedisStore.open_existing(location, prefix=REDIS_PREFIX)
    from scrapy_dedup.store.leveldb import LevelDBStore

    return LevelDBStore(location, {"bench": NAME}) if create else LevelDBStore.open_existing(location)


def server_cpu(location: str, backend: str) -> float:
    """CPU seconds the Redis server has used (0 for an embedded store)."""
    if backend != "redis":
        return 0.0
    import redis

    info = redis.Redis.from_url(location).info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def synthetic(rng, simhash: int, minhash: bytes, bits: int, slots: int):
    """A fingerprint ``bits`` SimHash bits and ``slots`` MinHash slots away from the given ones
    (no text: a store without DEDUP_KEEP_TEXT decides on the MinHash estimate)."""
    import xxhash

    from scrapy_dedup.core.fingerprints import Fingerprint

    for bit in rng.integers(0, 64, bits).tolist():
        simhash ^= 1 << bit
    signature = bytearray(minhash)
    for slot, value in zip(rng.integers(0, len(signature), slots).tolist(), rng.integers(0, 256, slots).tolist()):
        signature[slot] = value
    content = xxhash.xxh3_128_hexdigest(simhash.to_bytes(8, "big") + bytes(signature))
    return Fingerprint(content_hash=content, simhash=simhash, minhash=bytes(signature), tokens=WORDS, length=6 * WORDS)


def build(location: str, backend: str, n: int, texts: bool = True) -> dict:
    """Write ``n`` documents in families, placed as online decisions place them (see above)."""
    import numpy as np

    from scrapy_dedup.core.bands import band_hashes
    from scrapy_dedup.core.fingerprints import NUM_PERM, fingerprint, hamming, raw_hash
    from scrapy_dedup.core.records import Cluster, UrlRecord, duplicate_reason, duplicate_status
    from scrapy_dedup.decide.clusters import cluster_id_for

    vocabulary = [f"w{i}" for i in range(VOCABULARY)]
    families = max(1, n // 4)
    founders = np.random.default_rng(1).integers(0, VOCABULARY, (families, WORDS), dtype=np.int16)
    edits = np.random.default_rng(2)
    founder_fp: dict[int, tuple[int, str]] = {}
    start = time.perf_counter()
    with open_store(location, backend, create=True) as store:
        run = store.begin_run()
        now = time.time()
        for first in range(0, n, 1_000):
            with store.batch() as batch:
                for i in range(first, min(n, first + 1_000)):
                    family = i % families
                    if texts:
                        words = founders[family].copy()
                        k = int(edits.integers(0, MAX_EDITS))
                        words[edits.integers(0, WORDS, k)] = edits.integers(0, VOCABULARY, k)
                        text = " ".join(map(vocabulary.__getitem__, words.tolist()))
                        fp = fingerprint(text)
                    else:  # the same spread: up to 4 SimHash bits and 64 of 256 MinHash slots
                        seed = np.random.default_rng([1, family])
                        base = int(seed.integers(0, 2**63)) << 1, seed.bytes(NUM_PERM)
                        fp = synthetic(edits, *base, int(edits.integers(0, 5)), int(edits.integers(0, 65)))
                        text = fp.content_hash
                    key = f"http://bench.example/doc/{i}"
                    founder = f"http://bench.example/doc/{family}"
                    cid = cluster_id_for("", founder)
                    record = UrlRecord(key, key, status="new", kind="document", cluster_id=cid,
                                       content_hash=fp.content_hash, raw_hash=raw_hash(text.encode()),
                                       simhash=fp.simhash, tokens=fp.tokens, text_length=fp.length,
                                       first_seen=now, last_seen=now, fetched_at=now, fetch_count=1, first_run=run)
                    if i == family:
                        cluster = Cluster(cid, key, key, 0, 0, scope="", size=n // families + (family < n % families))
                        cluster.represent(record)
                        put_cluster(batch, cluster)
                        batch.index_near("", fp.simhash, band_hashes(fp.minhash), cid)
                        founder_fp[family] = (fp.simhash, fp.content_hash)
                    else:
                        simhash, content = founder_fp[family]
                        record.reason = duplicate_reason(fp.content_hash, content)
                        record.status = duplicate_status(record.reason)
                        record.duplicate_of, record.distance = founder, hamming(fp.simhash, simhash)
                        add_member(batch, cid, key)
                    batch.put_url(record)
                    put_minhash(batch, key, fp.minhash)
                    if texts:
                        put_text(batch, key, text)
                    index_raw(batch, record.raw_hash, key)
                    index_exact(batch, "", fp.content_hash, cid)
            if first and first % 100_000 == 0:
                log(NAME, f"  {first:,} documents written")
    return {"docs": n, "seconds": time.perf_counter() - start}


def decide_more(location: str, backend: str, n: int, changes: int) -> dict:
    """Decide ``changes`` edited copies of the first documents online (a re-crawl's new pages)."""
    import random

    import numpy as np

    from scrapy_dedup.core.fingerprints import fingerprint, raw_hash
    from scrapy_dedup.decide.index import ContentIndex, Document

    rng, edits = random.Random(3), np.random.default_rng(3)
    with open_store(location, backend) as store:
        keys = [f"http://bench.example/doc/{i}" for i in range(changes)]
        texts = [get_text(store, key) for key in keys]
        fingerprints = [(get_url(store, key).simhash, get_minhash(store, key)) for key in keys]
        store.begin_run()
        index = ContentIndex(store, store.run, **SETTINGS)
        before, server_before = cpu(), server_cpu(location, backend)
        for i, (text, (simhash, minhash)) in enumerate(zip(texts, fingerprints)):
            url = f"http://bench.example/new/{i}"
            if text is None:
                fp = synthetic(edits, simhash, minhash, 1, 2)
                index.ingest(Document(url, url, fp, fp.content_hash))
                continue
            words = text.split()
            words[rng.randrange(len(words))] = f"edit{rng.randrange(10**6)}"
            text = " ".join(words)
            index.ingest(Document(url, url, fingerprint(text), raw_hash(text.encode()), text=text))
        return {"docs": changes, "cpu_s": cpu() - before, "server_cpu_s": server_cpu(location, backend) - server_before}


def child(location: str, backend: str, full: bool) -> dict:
    from scrapy_dedup.decide.settle import settle

    with MemoryWatch() as mem, open_store(location, backend) as store:
        before, server_before, start = cpu(), server_cpu(location, backend), time.perf_counter()
        result = settle(store, **SETTINGS, incremental=not full)
        seconds, cpu_s = time.perf_counter() - start, cpu() - before
        server_s = server_cpu(location, backend) - server_before
    report = mem.report()
    return {
        "docs": result.documents,
        "clusters": result.clusters,
        "revised": result.revised,
        "rewritten": result.rewritten,
        "affected": result.affected,
        "seconds": seconds,
        "cpu_s": cpu_s,
        "server_cpu_s": server_s,
        "peak_anon_mb": (report["peak_anon"] - report["base_anon"]) / 2**20,
    }


def measure(location: str, backend: str, n: int, kept: Path | None = None, texts: bool = True) -> dict:
    if kept is not None and (kept / "built.json").exists():
        # a LevelDB store written before by the same code: a copy of it (10^6 documents take long to write)
        out = {"build": json.loads((kept / "built.json").read_text())}
        shutil.copytree(kept / "built", location)
    else:
        log(NAME, f"writing {n:,} documents in families into a {backend} store")
        out = {"build": build(location, backend, n, texts)}
        if kept is not None:
            shutil.copytree(location, kept / "built")
            (kept / "built.json").write_text(json.dumps(out["build"]))
    log(NAME, f"written: {out['build']}")
    argv = [str(Path(__file__)), "--child", location, "--backend", backend]
    out["first"] = run_child(argv)
    log(NAME, f"first settle: {out['first']}")
    out["again"] = run_child(argv)
    log(NAME, f"second settle: {out['again']}")
    if n <= FULL_AGAIN_UP_TO:
        out["full"] = run_child([*argv, "--full"])
        log(NAME, f"a full settle of the settled store: {out['full']}")
    out["changed"] = decide_more(location, backend, n, max(1, int(n * CHANGED)))
    log(NAME, f"{CHANGED:.0%} more documents decided online: {out['changed']}")
    out["after"] = run_child(argv)
    log(NAME, f"settle after them: {out['after']}")
    return out


def rows_of(n: int, backend: str, res: dict) -> list[dict]:
    first, again, changed, after = res["first"], res["again"], res["changed"], res["after"]
    where = f"{n:,} documents ({backend}{', texts kept' if res['texts'] else ', no texts: MinHash estimates'})"
    rows = []
    full = [("first settle (revises the provisional clusters)", first)]
    if "full" in res:
        full.append(("full settle of a settled store", res["full"]))
    for label, res_ in full:
        rate = res_["docs"] / res_["cpu_s"]
        both = res_["docs"] / (res_["cpu_s"] + res_["server_cpu_s"])
        rows.append(row(NAME, f"{where}: {label}, documents/s per core (CPU time)", fmt(rate),
                        f"client + server {fmt(both)}" if backend == "redis" else f"wall {fmt(res_['docs'] / res_['seconds'])}",
                        "", f">= {TARGET_RATE:,}", min(rate, both) >= TARGET_RATE))
        rows.append(row(NAME, f"{where}: {label}, peak private memory above the start", f"+{res_['peak_anon_mb']:.0f} MB",
                        f"{res_['peak_anon_mb'] * 2**20 / n:.0f} bytes a document", "", "flat", None))
    crawl_ms, source = crawl_cpu_ms()
    share = (after["cpu_s"] + after["server_cpu_s"]) / (changed["docs"] * crawl_ms / 1000)
    rows.append(row(NAME, f"{where}, then {changed['docs']:,} more decided online: incremental settle CPU against the crawl "
                    f"CPU of those pages ({after['affected']:,} documents settled again)",
                    f"{after['cpu_s'] + after['server_cpu_s']:.2f} s",
                    f"crawl {changed['docs'] * crawl_ms / 1000:.1f} s ({crawl_ms:.1f} ms a page, {source}); "
                    f"online decisions {changed['cpu_s'] + changed['server_cpu_s']:.2f} s",
                    f"{share:.1%}", f"<= {TARGET_SHARE:.0%}", share <= TARGET_SHARE))
    rows.append(row(NAME, f"{where}: incremental settle with nothing decided since, CPU", f"{again['cpu_s'] + again['server_cpu_s']:.2f} s",
                    f"full {first['cpu_s'] + first['server_cpu_s']:.1f} s", "", "report", None))
    rows.append(row(NAME, f"{where}: provisional decisions the first settle revised", f"{first['revised']:,}",
                    f"{first['clusters']:,} clusters", "", "report", None))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--docs", type=int, help="documents in the store (default by size)")
    parser.add_argument("--backend", choices=("leveldb", "redis"), default="leveldb")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", type=Path, metavar="DIR", help="LevelDB: keep the store written in DIR and "
                        "measure on a copy of it when it is there already")
    parser.add_argument("--no-text", action="store_true", help="synthetic fingerprints, no texts kept: pairs are "
                        "decided on the MinHash estimate (DEDUP_KEEP_TEXT = False); writes far faster")
    parser.add_argument("--build-only", action="store_true", help="with --keep: write the store, measure nothing")
    parser.add_argument("--child", metavar="STORE", help=argparse.SUPPRESS)
    parser.add_argument("--full", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.backend, args.full)))
        return 0
    n = args.docs or SIZES[args.size]
    tmp = Path(tempfile.mkdtemp(prefix="bench-settle-"))
    try:
        if args.backend == "redis":
            from redis_servers import RedisServer

            with RedisServer(tmp / "redis") as server:
                res = measure(server.url, args.backend, n, texts=not args.no_text)
        elif args.build_only:
            args.keep.mkdir(parents=True, exist_ok=True)
            built = build(str(args.keep / "built"), args.backend, n, not args.no_text)
            (args.keep / "built.json").write_text(json.dumps(built))
            log(NAME, f"written: {built}")
            return 0
        else:
            res = measure(str(tmp / "store"), args.backend, n, args.keep, not args.no_text)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["texts"] = not args.no_text
    rows = rows_of(n, args.backend, res)
    name = NAME if args.backend == "leveldb" and not args.docs and not args.no_text else (
        f"{NAME}_{args.backend}_{n}{'_notext' if args.no_text else ''}")
    payload = {"size": args.size, "docs": n, "backend": args.backend, "results": res, "rows": rows,
               "notes": ["the store is written directly in families of near-duplicate texts (bench_settle.py's "
                         "docstring); CPU time, not wall time, so that the machine's load moves it less"]}
    write_result(name, payload, args.out)
    for r in rows:
        print(f"{r['measure']}: {r['scrapy_dedup']} | {r['alternatives']} | {r['ratio']} | {r['target']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
