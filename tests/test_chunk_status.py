"""Chunk statuses across documents: first source, exact and near duplicates, short and boilerplate chunks."""

from __future__ import annotations

import random

from scrapy_dedup.core.boilerplate import BoilerplateLearner, strip_boilerplate
from scrapy_dedup.core.chunk_status import CHUNK_STATUSES, settle_chunks
from scrapy_dedup.core.chunks import chunk_text

PREAMBLE = " ".join(f"preamble{i}" for i in range(70))  # a shared 70-word install preamble
FOOTER = "Was this page helpful? Tell us."


def _body(name: str, n: int = 80) -> str:
    return " ".join(f"{name}{i}" for i in range(n))


def _docs() -> dict[str, str]:
    near = PREAMBLE.replace("preamble35", "changed")  # one word of 70: J about 0.87
    return {
        "http://h/a": f"{PREAMBLE}\n{_body('a')}\n{FOOTER}",
        "http://h/b": f"{_body('b')}\n{PREAMBLE}\n{FOOTER}",
        "http://h/c": f"{near}\n{_body('c')}\n{FOOTER}",
        "http://h/d": f"short shared line\n{_body('d')}\n{FOOTER}",
        "http://h/e": f"short shared lines\n{_body('e')}\n{FOOTER}",
    }


def _settle(order: list[str]) -> dict[tuple[str, str], tuple[str, str | None]]:
    texts = _docs()
    learner = BoilerplateLearner()
    for url, text in texts.items():
        learner.observe("h", url, text)
    docs = []
    for url in order:
        text = texts[url]
        spans = strip_boilerplate(text, learner.boilerplate_keys("h")).removed
        docs.append((url, chunk_text(text, max_words=80, boilerplate=spans, scope=url)))
    text_of = {c.chunk_id: c.text for _, chunks in docs for c in chunks}
    owner = {c.chunk_id: url for url, chunks in docs for c in chunks}
    return {
        (s.document_id, text_of[s.chunk_id][:12]): (s.status, owner.get(s.duplicate_of))
        for s in settle_chunks(docs)
    }


def test_a_shared_chunk_is_new_once_and_a_duplicate_of_its_first_source_elsewhere():
    statuses = _settle(sorted(_docs()))
    assert statuses[("http://h/a", "preamble0 pr")] == ("new", None)
    assert statuses[("http://h/b", "preamble0 pr")] == ("exact_duplicate", "http://h/a")
    assert statuses[("http://h/c", "preamble0 pr")] == ("near_duplicate", "http://h/a")
    assert all(statuses[(u, _body(u[-1])[:12])] == ("new", None) for u in _docs())


def test_short_chunks_are_exact_only_and_boilerplate_is_never_a_source():
    statuses = _settle(sorted(_docs()))
    assert statuses[("http://h/d", "short shared")] == ("new", None)
    assert statuses[("http://h/e", "short shared")] == ("new", None)  # similar, but under 50 words
    footers = [v for (url, text), v in statuses.items() if text == FOOTER[:12]]
    assert footers == [("boilerplate", None)] * 5


def test_statuses_depend_on_the_settled_order_not_on_arrival():
    urls = list(_docs())
    results = set()
    for seed in range(5):
        arrival = urls[:]
        random.Random(seed).shuffle(arrival)
        results.add(tuple(sorted(_settle(sorted(arrival)).items())))
    assert len(results) == 1
    assert set(s for s, _ in dict(results.pop()).values()) == set(CHUNK_STATUSES)
