"""A Sphinx page keeps every section, whatever the section is named after.

Sphinx names each section after its heading (``<section id="authors">``, its heading's permalink
pointing to it), and trafilatura cuts an element whose id holds "author", "tags", "nav", "share",
"related"... as a widget: the license page of Babel 2.10.3 (Debian bookworm's python-babel-doc)
lost its "Authors" section (134 names), its locale page the "Likely Subtags" section. Crawled
through the real CLI from a server on 127.0.0.1.
"""

from __future__ import annotations

from crawl_helpers import crawled_page

from scrapy_dedup.extraction.main_text import extract_text

SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0}

NAMES = ("Ada Quill", "Basil Norrow", "Cleo Vantard", "Dmitri Oyelaran", "Esme Turnbull")


def sphinx_page(title: str, body: str) -> str:
    """A page as Sphinx 5 writes it with its Read the Docs theme: a side menu, then the text."""
    return f"""<!DOCTYPE html><html><head><title>{title} - Manual</title></head><body>
<nav class="wy-nav-side"><ul><li><a href="index.html">Index</a></li><li><a href="api.html">API</a></li></ul></nav>
<div class="wy-nav-content"><div role="main" class="document" itemscope="itemscope">
<div itemprop="articleBody"><section id="{title.lower()}">
<h1>{title}<a class="headerlink" href="#{title.lower()}" title="Permalink to this heading">¶</a></h1>
{body}
</section></div></div></div></body></html>"""


def section(name: str, slug: str, text: str) -> str:
    return f"""<section id="{slug}">
<h2>{name}<a class="headerlink" href="#{slug}" title="Permalink to this heading">¶</a></h2>
{text}
</section>"""


def license_page() -> str:
    names = "".join(f"<li><p>{name}</p></li>" for name in NAMES)
    return sphinx_page(
        "License",
        "<p>The library is licensed under a three clause BSD license: do what you want with it, as long as "
        "the copyright stays, the conditions are not modified and the disclaimer is present.</p>"
        + section(
            "Authors",
            "authors",
            "<p>The library is written and maintained by its team and various contributors:</p>"
            f'<ul class="simple">{names}</ul>'
            "<p>It was developed under the copyright of another company before 2013.</p>",
        )
        + section(
            "Likely Subtags",
            "likely-subtags",
            "<p>When dealing with locales you can run into the situation where a locale tag is not fully "
            "descriptive: the likely subtags fill in the script and the territory.</p>",
        )
        + section(
            "Full License Text",
            "full-license-text",
            "<p>Redistribution and use in source and binary forms, with or without modification, are "
            "permitted provided that the conditions below are met.</p>",
        ),
    )


def test_a_section_named_like_a_widget_keeps_its_text():
    text = extract_text(license_page())
    for words in (*NAMES, "Authors", "maintained by its team", "Likely Subtags", "fill in the script"):
        assert words in text
    # named otherwise, the sections give the same text
    renamed = license_page().replace('"authors"', '"people"').replace('"#authors"', '"#people"')
    renamed = renamed.replace('"likely-subtags"', '"likely-parts"').replace('"#likely-subtags"', '"#likely-parts"')
    assert extract_text(renamed) == text
    # the side menu is still no text
    assert "API" not in text


def test_the_export_of_a_sphinx_page_has_every_section(tmp_path):
    doc = crawled_page(license_page(), tmp_path, SETTINGS)
    for words in (*NAMES, "Likely Subtags"):
        assert words in doc["text"]
