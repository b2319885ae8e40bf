"""A page whose markup holds a tag name XML does not allow keeps its text.

Javadoc copies a comment's ``<pre>`` as it is, so a generic type written without escaping,
``EnclosingBall<Sphere2D, S2Point> cap``, reaches the page as an element named ``sphere2d,``.
lxml's HTML parser takes it, but trafilatura builds its output with ``SubElement``, which refuses
the name: its ValueError threw the whole page away, and the crawl recorded it as a page without
text (``skipped_empty``). On the Apache Commons Math 3.6.1 API (libcommons-math3-java-doc
3.6.1-3), the class page of ``SphericalPolygonsSet``, 1,551 words, was so lost. A browser shows
such an element's content as text, and so does the extraction now. Crawled through the real
pipeline from a server on 127.0.0.1.
"""

from __future__ import annotations

from crawl_helpers import crawled_page

from scrapy_dedup.extraction.main_text import extract_text

SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0}


def class_page() -> str:
    """A javadoc class page whose method description has an unescaped generic in its ``<pre>``."""
    return """<!DOCTYPE html><html><head><title>SphericalPolygonsSet</title></head><body>
<div class="header"><h2 class="title">Class SphericalPolygonsSet</h2></div>
<div class="contentContainer"><div class="details"><ul class="blockList"><li class="blockList">
<h3>Method Detail</h3>
<h4>getEnclosingCap</h4>
<pre>public EnclosingBall getEnclosingCap()</pre>
<div class="block"><p>Get a spherical cap enclosing the polygon.</p>
<p>This method is intended as a first test to quickly identify points that are guaranteed to be
outside of the region. A typical use case is therefore:</p>
<pre>
   SphericalPolygonsSet complexShape = ...;
   EnclosingBall<Sphere2D, S2Point> cap = complexShape.getEnclosingCap();
   for (Vector3D p : points) {
     final Location l = cap.contains(p) ? complexShape.checkPoint(p) : Location.OUTSIDE;
   }
</pre>
<p>In the example above, the polygon may contain holes.</p></div>
</li></ul></div></div></body></html>"""


KEPT = (
    "Get a spherical cap enclosing the polygon.",
    "complexShape.getEnclosingCap();",
    "In the example above, the polygon may contain holes.",
)


def test_a_tag_name_xml_refuses_does_not_empty_the_page():
    text = extract_text(class_page())
    for words in KEPT:
        assert words in text


def test_the_page_is_a_document_of_the_export(tmp_path):
    doc = crawled_page(class_page(), tmp_path, SETTINGS)
    for words in KEPT:
        assert words in doc["text"]
