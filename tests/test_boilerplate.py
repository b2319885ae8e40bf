"""Per-host boilerplate: document frequency, the two thresholds, order independence, stripping."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from scrapy_dedup.core.boilerplate import (
    BoilerplateLearner,
    boilerplate_group,
    boilerplate_threshold,
    paragraph_key,
    paragraphs,
    strip_boilerplate,
)
from scrapy_dedup.core.chunks import chunk_text

FOOTER = "Was this page helpful? Send us feedback."
PREAMBLE = "Harbor is released under the Apache 2.0 licence."


def _page(i: int, *extra: str) -> str:
    return "\n".join([f"Page {i} explains topic {i} in its own words.", *extra, f"Topic {i} ends here."])


def _site(n: int = 10) -> dict[str, str]:
    pages = {}
    for i in range(n):
        extra = [FOOTER] if i < 8 else []  # 8 of 10 pages
        if i < 4:
            extra.append(PREAMBLE)  # 4 of 10: under half
        pages[f"http://h/p{i:02d}.html"] = _page(i, *extra)
    return pages


def _learn(pages: dict[str, str], **kw) -> BoilerplateLearner:
    learner = BoilerplateLearner(**kw)
    for url, text in pages.items():
        learner.observe("h", url, text)
    return learner


def test_a_paragraph_on_half_the_pages_or_more_is_boilerplate():
    learner = _learn(_site())
    learned = learner.learned("h")
    assert [(p.text, p.pages, p.group_pages, p.example_url) for p in learned] == [
        (FOOTER.casefold(), 8, 10, "http://h/p00.html")
    ]


def test_the_share_and_the_minimum_both_bind():
    assert boilerplate_threshold(10, 3, 0.3) == 3
    assert boilerplate_threshold(100, 3, 0.3) == 30
    assert boilerplate_threshold(2, 3, 0.5) == 3  # small hosts: the minimum decides
    learner = _learn(_site(), share=0.4)
    assert {p.text for p in learner.learned()} == {FOOTER.casefold(), PREAMBLE.casefold()}
    small = _learn({"http://h/a": f"a\n{FOOTER}", "http://h/b": f"b\n{FOOTER}"})
    assert small.learned() == []  # on every page, but only two pages


def test_a_page_counts_a_paragraph_once_however_often_it_repeats():
    pages = {f"http://h/{i}": f"text {i}" for i in range(9)}
    pages["http://h/x"] = "\n".join([FOOTER] * 20)
    learner = _learn(pages, min_pages=2)
    assert learner.learned() == []


def test_case_and_whitespace_do_not_split_a_paragraph():
    assert paragraph_key("Send  us FEEDBACK") == paragraph_key("send us feedback\u00a0")
    assert paragraph_key("   ") == ""


def test_learning_does_not_depend_on_the_order_of_pages():
    pages = list(_site(12).items())
    results = set()
    for seed in range(6):
        random.Random(seed).shuffle(pages)
        learner = BoilerplateLearner(share=0.3)
        for url, text in pages:
            learner.observe("h", url, text)
        results.add(tuple(learner.learned()))
    assert len(results) == 1


def test_observing_a_page_again_replaces_it_and_forget_removes_it():
    learner = _learn(_site())
    for i in range(8):  # the footer is taken off 5 of its 8 pages: 3 of 10 left
        if i % 2 or i < 2:
            learner.observe("h", f"http://h/p{i:02d}.html", _page(i))
    assert learner.learned() == []
    for i in range(8, 10):
        learner.forget("h", f"http://h/p{i:02d}.html")
    assert learner.group_pages("h") == 8
    assert learner.threshold("h") == 4


def test_groups_are_separate():
    learner = BoilerplateLearner()
    for i in range(4):
        learner.observe("a", f"http://a/{i}", f"own {i}\n{FOOTER}")
        learner.observe("b", f"http://b/{i}", f"own {i}")
    assert [p.group for p in learner.learned()] == ["a"]
    assert learner.learned("b") == []


def test_groups_by_host_and_optionally_first_path_segment():
    assert boilerplate_group("http://H.example:80/x") == "h.example"
    assert boilerplate_group("https://h.example:8443/docs/a/b") == "h.example:8443"
    assert boilerplate_group("https://h.example/docs/a/b", by_path=True) == "h.example/docs"
    assert boilerplate_group("http://[::1", by_path=True) == "http://[::1"  # unsplittable: kept whole


def test_strip_records_spans_and_never_empties_a_page():
    learner = _learn(_site())
    page = _site()["http://h/p03.html"]
    stripped = strip_boilerplate(page, learner.is_boilerplate("h"))
    assert [page[a:b] for a, b in stripped.removed] == [FOOTER]
    assert stripped.removed_chars() == len(FOOTER)
    only = strip_boilerplate(FOOTER, learner.boilerplate_keys("h"))
    assert only.removed == () and only.kept == ((0, len(FOOTER)),)


def test_boilerplate_spans_become_chunks_of_their_own():
    learner = _learn(_site())
    page = _site()["http://h/p03.html"]
    stripped = strip_boilerplate(page, learner.boilerplate_keys("h"))
    chunks = chunk_text(page, boilerplate=stripped.removed)
    assert [(c.text, c.boilerplate) for c in chunks] == [
        ("Page 3 explains topic 3 in its own words.", False),
        (FOOTER, True),
        (f"{PREAMBLE}\nTopic 3 ends here.", False),
    ]


def test_settings_are_checked():
    with pytest.raises(ValueError, match="min_pages"):
        BoilerplateLearner(min_pages=1)
    with pytest.raises(ValueError, match="share"):
        BoilerplateLearner(share=0)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["a b", "c", "A  B", "d e f", "", "x"]), max_size=6), min_size=1, max_size=12))
def test_order_independent_and_spans_cover_every_line(pages):
    texts = {f"http://h/{i}": "\n".join(lines) for i, lines in enumerate(pages)}
    forward = _learn(texts, min_pages=2, share=0.3)
    backward = _learn(dict(reversed(list(texts.items()))), min_pages=2, share=0.3)
    assert forward.learned() == backward.learned()
    for text in texts.values():
        s = strip_boilerplate(text, forward.boilerplate_keys("h"))
        assert sorted(s.kept + s.removed) == list(paragraphs(text))
        assert s.kept or not list(paragraphs(text))
