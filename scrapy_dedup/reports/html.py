"""``scrapy dedup report --html FILE``: one self-contained page about a store.

Summary, near-duplicate distances, cluster sizes, duplicate rate per host,
the largest clusters with diffs, and the calibration sample.  Charts are
inline SVG; there is no script and no external asset, so the file works
offline and can be attached to a ticket.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from html import escape
from typing import Any

from scrapy_dedup.core.records import ALIAS_REASONS
from scrapy_dedup.reports import calibrate, clusters, summary
from scrapy_dedup.reports.diff import SAME, as_html, word_diff
from scrapy_dedup.reports.formats import Progress, strip_control
from scrapy_dedup.reports.resolve import Resolver
from scrapy_dedup.reports.svg import bar_chart, rate_bars
from scrapy_dedup.reports.texts import Texts
from scrapy_dedup.store.base import DedupStore

#: cluster-size buckets of the distribution chart: (label, smallest, largest)
SIZE_BUCKETS = (
    ("1", 1, 1), ("2", 2, 2), ("3", 3, 3), ("4", 4, 4), ("5", 5, 5), ("6–10", 6, 10),
    ("11–20", 11, 20), ("21–50", 21, 50), ("51–100", 51, 100), ("101+", 101, None),
)
#: hosts shown in the per-host chart and table
MAX_HOSTS = 25
#: members of a large cluster shown with a diff
DIFFS_PER_CLUSTER = 5

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2733;margin:0;
background:#f5f7f9}
main{max-width:1180px;margin:0 auto;padding:24px 32px 48px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 8px;border-bottom:1px solid #d5dde5;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
.sub{color:#5b6b7b;margin:0 0 16px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px}
.card{background:#fff;border:1px solid #dde3ea;border-radius:6px;padding:10px 12px}
.card b{display:block;font-size:22px}.card span{color:#5b6b7b;font-size:12px}
.charts{display:flex;flex-wrap:wrap;gap:16px}
.charts>div{background:#fff;border:1px solid #dde3ea;border-radius:6px;padding:8px}
table{border-collapse:collapse;background:#fff;margin:6px 0;font-size:13px}
th,td{border:1px solid #dde3ea;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eef2f6;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
td.u{word-break:break-all;max-width:560px}
.diff{font-size:12.5px;background:#fbfcfd;max-width:1100px}
del{background:#fbd5d2;text-decoration:line-through}ins{background:#cdeccf;text-decoration:none}
.skip{color:#8a99a8;font-style:italic}.note{color:#5b6b7b;font-size:12.5px}
svg text.t{font-size:13px;font-weight:600;fill:#1d2733}svg text.a{font-size:11px;fill:#4a5866}
svg text.v{font-size:10px;fill:#1d2733}svg line.grid{stroke:#e1e6eb}
"""


def build(
    store: DedupStore,
    *,
    texts: Texts,
    top: int = 10,
    per_distance: int = 3,
    min_tokens: int | None = None,
    authority: Sequence[str] = (),
    progress: Progress | None = None,
) -> str:
    progress = progress or Progress("reading the store")
    stats = summary.collect(store, progress)
    resolver = Resolver(store)
    largest = [
        clusters.describe(store, resolver, c, authority)
        for c in clusters.select(store, min_size=2, top=top, progress=progress)
    ]
    for cluster in largest:
        _add_diffs(cluster, texts)
    kwargs = {"min_tokens": min_tokens} if min_tokens is not None else {}
    cal = calibrate.sample(store, per_distance=per_distance, texts=texts, progress=progress, **kwargs)
    return render(stats, largest, cal, texts)


def _add_diffs(cluster: dict[str, Any], texts: Texts) -> None:
    members = cluster["members"]
    rep = next((m for m in members if m["reason"] is None), None)
    if rep is None or not texts.available:
        return
    rep_text = texts.get(rep["key"], rep["url"])
    if rep_text is None:
        return
    for member in [m for m in members if m["reason"] is not None][:DIFFS_PER_CLUSTER]:
        text = texts.get(member["key"], member["url"])
        if text is not None:
            member["diff"] = word_diff(rep_text, text)


def render(stats: summary.Summary, largest: list[dict[str, Any]], cal: calibrate.Calibration, texts: Texts) -> str:
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    k = stats.params.get("max_distance", cal.k)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>scrapy-dedup report: {escape(stats.path)}</title><style>{CSS}</style></head><body><main>",
        "<h1>Deduplication report</h1>",
        f'<p class="sub">Store <code>{escape(stats.path)}</code> · {stats.runs} crawl run(s) · '
        f"{summary.near_settings(stats.params)} · generated {generated}</p>",
        _summary_section(stats),
        '<h2>Distributions</h2><div class="charts">',
        f"<div>{_distance_chart(stats, int(k) if isinstance(k, int) else cal.k)}</div>",
        f"<div>{_size_chart(stats)}</div></div>",
        _hosts_section(stats),
        _clusters_section(largest, texts),
        _calibration_section(cal),
        "</main></body></html>",
    ]
    # escape() leaves control characters (ESC from a crawled page): they have no place in HTML
    return strip_control("\n".join(parts))


def _card(value: int, label: str) -> str:
    return f'<div class="card"><b>{value:,}</b><span>{escape(label)}</span></div>'


def _summary_section(s: summary.Summary) -> str:
    dropped = sum(s.dropped_urls.values())
    cards = [
        _card(s.urls_known, "URLs seen"),
        _card(s.documents, "documents kept"),
        _card(s.duplicates, "aliases (not canonical)"),
        _card(s.copies.get("exact_duplicate", 0), "exact duplicates"),
        _card(s.copies.get("near_duplicate", 0), "near duplicates"),
        _card(s.aliases.get("rel_canonical", 0), "rel=canonical aliases"),
        _card(s.aliases.get("redirect", 0), "redirects"),
        _card(dropped, "URL variants never fetched"),
        _card(s.statuses.get("unchanged", 0), "unchanged"),
        _card(s.canonical_mismatches, "canonical mismatches"),
    ]
    rows = "".join(
        f'<tr><td>{escape(reason)}</td><td class="n">{s.aliases.get(reason, 0):,}</td></tr>' for reason in ALIAS_REASONS
    )
    statuses = "".join(
        f'<tr><td>{escape(status)}</td><td class="n">{n:,}</td></tr>' for status, n in sorted(s.statuses.items())
    )
    return (
        '<h2>Summary</h2><div class="cards">' + "".join(cards) + "</div>"
        '<div class="charts" style="margin-top:10px"><div><table><tr><th>alias reason</th><th>URLs</th></tr>'
        + rows + "</table></div><div><table><tr><th>last status of URL records</th><th>URLs</th></tr>"
        + statuses + "</table></div></div>"
    )


def _distance_chart(s: summary.Summary, k: int) -> str:
    high = max([k + 3, *s.near_distances])
    bars = [(str(d), s.near_distances.get(d, 0)) for d in range(0, high + 1)]
    return bar_chart(
        bars,
        title="Near duplicates by Hamming distance to their canonical",
        xlabel="Hamming distance (64-bit SimHash)",
        ylabel="near duplicates",
        marked={str(d) for d in range(k + 1, high + 1)},
        mark_label=f"beyond k={k} (Jaccard)",
    )


def _size_chart(s: summary.Summary) -> str:
    bars = []
    for label, low, high in SIZE_BUCKETS:
        count = sum(n for size, n in s.cluster_sizes.items() if size >= low and (high is None or size <= high))
        bars.append((label, count))
    return bar_chart(bars, title="Cluster sizes", xlabel="URLs with the same content", ylabel="documents")


def _hosts_section(s: summary.Summary) -> str:
    hosts = sorted(s.hosts.items(), key=lambda hc: (-hc[1].urls, hc[0]))[:MAX_HOSTS]
    if not hosts:
        return "<h2>Duplicate rate per host</h2><p>No URL in the store.</p>"
    chart = rate_bars(
        [(h, c.rate, f"{c.rate:.1%} of {c.documents + c.duplicates:,}") for h, c in hosts],
        title="Duplicate rate per host (exact and near duplicates / URLs with content)",
        width=640,
    )
    rows = "".join(
        f'<tr><td>{escape(h)}</td><td class="n">{c.urls:,}</td><td class="n">{c.documents:,}</td>'
        f'<td class="n">{c.duplicates:,}</td><td class="n">{c.rate:.1%}</td></tr>'
        for h, c in hosts
    )
    more = f'<p class="note">{len(s.hosts) - MAX_HOSTS:,} more hosts not shown.</p>' if len(s.hosts) > MAX_HOSTS else ""
    return (
        f'<h2>Duplicate rate per host</h2><div class="charts"><div>{chart}</div><div><table>'
        "<tr><th>host</th><th>URLs</th><th>documents</th><th>duplicates</th><th>rate</th></tr>"
        f"{rows}</table></div></div>{more}"
    )


def _num(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}" if isinstance(value, float) else f"{value:,}"


def _link(url: str) -> str:
    """A link for http(s) URLs only: an item's URL comes from the spider (``javascript:``...)."""
    if url.lower().startswith(("http://", "https://")):
        return f'<a href="{escape(url)}">{escape(url)}</a>'
    return escape(url)


def _clusters_section(largest: list[dict[str, Any]], texts: Texts) -> str:
    out = [
        "<h2>Largest clusters</h2>"
        f'<p class="note">Diffs against the representative; texts from {escape(texts.source)}.</p>'
    ]
    if not largest:
        out.append("<p>No document has more than one URL.</p>")
    for c in largest:
        out.append(
            f"<h3>{c['size']} URLs · largest distance {c['max_distance']} · cluster <code>{c['cluster_id']}</code></h3>"
            f'<p class="note">Kept {_link(c["representative"])}: '
            f"{escape(c['why'])}.</p>"
            "<table><tr><th>role</th><th>URL</th><th>distance</th><th>Jaccard</th><th>characters</th></tr>"
        )
        for m in c["members"]:
            out.append(
                f'<tr><td>{escape(m["reason"] or "canonical")}</td><td class="u">{escape(m["url"])}</td>'
                f'<td class="n">{_num(m["distance"])}</td><td class="n">{_num(m["jaccard"])}</td>'
                f'<td class="n">{_num(m["text_length"])}</td></tr>'
            )
            if m.get("diff") is not None:
                diff = as_html(m["diff"]) or SAME
                out.append(f'<tr><td></td><td colspan="4" class="diff">{diff}</td></tr>')
        out.append("</table>")
    return "".join(out)


def _calibration_section(cal: calibrate.Calibration) -> str:
    out = [
        "<h2>Calibration sample</h2>",
        f'<p class="note">Stored pairs at each Hamming distance around k = {cal.k}: members against their '
        "representative (merged) and representatives sharing a SimHash block (kept apart). Read the pairs: the "
        "threshold belongs where they stop being the same document. "
        f"{cal.scanned:,} documents scanned; texts from {escape(cal.text_source)}.</p>",
        "<table><tr><th>distance</th><th></th><th>pairs found</th><th>merged</th><th>Jaccard min</th>"
        "<th>median</th><th>max</th></tr>",
    ]
    for d in cal.rows():
        lo, mid, hi = calibrate.jaccard_range(cal.samples.get(d, []))
        out.append(
            f'<tr><td class="n">{d}</td><td>{"≤ k" if d <= cal.k else "&gt; k"}</td><td class="n">{cal.found[d]:,}</td>'
            f'<td class="n">{cal.merged[d]:,}</td><td class="n">{_num(lo)}</td><td class="n">{_num(mid)}</td>'
            f'<td class="n">{_num(hi)}</td></tr>'
        )
    out.append("</table>")
    for d, pairs in cal.sampled():
        out.append(f"<h3>Distance {d}</h3><table><tr><th>Jaccard</th><th>pair</th><th>outcome</th></tr>")
        for p in pairs:
            out.append(
                f'<tr><td class="n">{_num(p.jaccard)}</td><td class="u">{escape(p.url)}<br>{escape(p.other_url)}</td>'
                f'<td>{"merged" if p.merged else "kept apart"}</td></tr>'
            )
            if p.diff is not None:
                out.append(f'<tr><td></td><td colspan="2" class="diff">{as_html(p.diff) or SAME}</td></tr>')
        out.append("</table>")
    return "".join(out)
