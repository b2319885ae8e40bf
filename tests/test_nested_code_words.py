"""The words after a ``<code>`` nested in a ``<code>`` stay in the text, in their place.

BoostBook links a class from a description as ``<code><code><a>circular_buffer</a></code></code>``.
trafilatura dropped what followed such a pair ("Linear (in the size of the circular_buffers)."
lost "s).") or moved the code to the end of its paragraph ("The circular_buffer to compare."
became "The to compare. circular_buffer"): on the Boost 1.81 docs (libboost1.81-doc), 283 such
tails on 31 of 1,239 pages. Crawled through the real CLI from a server on 127.0.0.1.
"""

from __future__ import annotations

from crawl_helpers import crawled_page

from scrapy_dedup.extraction.main_text import extract_text

SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0}

CB = '<code class="computeroutput"><code class="computeroutput"><a class="link" href="cb.html">circular_buffer</a></code></code>'


def operator_page() -> str:
    """A BoostBook reference page of a function, as the Boost docs have them (no <article>)."""
    return f"""<!DOCTYPE html><html><head><title>Function template operator==</title></head><body>
<div class="spirit-nav"><a href="prev.html">Prev</a><a href="next.html">Next</a></div>
<div class="refentry"><div class="refnamediv"><h2>Function template operator==</h2>
<p>boost::operator== — Compare two {CB}s element-by-element to determine if they are equal.</p></div>
<div class="refsynopsisdiv"><pre class="synopsis">template&lt;typename T, typename Alloc&gt;
  bool operator==(const circular_buffer&lt; T, Alloc &gt; &amp; lhs,
                  const circular_buffer&lt; T, Alloc &gt; &amp; rhs);</pre></div>
<div class="refsect1"><h2>Description</h2>
<p><b>Complexity. </b>Linear (in the size of the {CB}s). </p>
<p><b>Iterator Invalidation. </b>Does not invalidate any iterators. </p>
<table class="variablelist compact"><tbody>
<tr><td><p><span class="term"><code class="computeroutput">lhs</code></span></p></td>
<td><p>The {CB} to compare. </p></td></tr>
<tr><td><p><span class="term"><code class="computeroutput">rhs</code></span></p></td>
<td><p>The {CB} to compare with it. </p></td></tr>
</tbody></table></div></div>
<div class="spirit-nav"><a href="prev.html">Prev</a></div></body></html>"""


KEPT = (
    "Compare two circular_buffers element-by-element",
    "Linear (in the size of the circular_buffers).",
    "The circular_buffer to compare.",
    "The circular_buffer to compare with it.",
)


def test_the_words_after_a_nested_code_are_kept_in_place():
    text = extract_text(operator_page())
    for words in KEPT:
        assert words in text


def test_the_export_has_the_words_after_a_nested_code(tmp_path):
    doc = crawled_page(operator_page(), tmp_path, SETTINGS)
    for words in KEPT:
        assert words in doc["text"]
