"""The structural chunker: sections, paragraphs, sentences, size cap, offsets and stable ids."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings, strategies as st

from scrapy_dedup.core.chunks import (
    CHUNK_PARAMS,
    DEFAULT_CHUNK_OVERLAP,
    Heading,
    chunk_id,
    chunk_text,
    markdown_headings,
)
from scrapy_dedup.core.fingerprints import content_hash
from scrapy_dedup.core.text import token_count


def _words(n: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


DOC = (
    "# Harbor guide\n"
    "Harbor indexes documents for retrieval.\n"
    "## Install\n"
    "Run pip install harbor-ingest in a virtual environment.\n"
    "Then check it with harbor doctor.\n"
    "### Containers\n"
    "Mount a volume at /var/lib/harbor.\n"
    "## Configure\n"
    "Write harbor.toml next to the store.\n"
)


def test_chunks_never_cross_a_heading_and_carry_the_heading_path():
    chunks = chunk_text(DOC)
    assert [c.heading for c in chunks] == [
        ("Harbor guide",),
        ("Harbor guide", "Install"),
        ("Harbor guide", "Install", "Containers"),
        ("Harbor guide", "Configure"),
    ]
    assert chunks[1].text == "Run pip install harbor-ingest in a virtual environment.\nThen check it with harbor doctor."
    assert all("#" not in c.text for c in chunks)


def test_offsets_slice_the_original_text():
    for chunk in chunk_text(DOC, max_words=5):
        assert DOC[chunk.start : chunk.end] == chunk.text


def test_paragraphs_are_packed_up_to_the_cap_then_a_new_chunk_starts():
    text = "\n".join(_words(30, f"p{i}x") for i in range(5))  # five 30-token lines
    chunks = chunk_text(text, max_words=70)
    assert [c.tokens for c in chunks] == [60, 60, 30]
    assert all(c.text.count("\n") <= 1 for c in chunks)  # lines stay whole


def test_a_long_paragraph_is_split_at_sentence_ends():
    sentences = [_words(12, f"s{i}x") + "." for i in range(6)]
    chunks = chunk_text(" ".join(sentences), max_words=30)
    assert [c.text for c in chunks] == [" ".join(sentences[i : i + 2]) for i in (0, 2, 4)]


def test_a_sentence_longer_than_the_cap_is_split_between_words():
    chunks = chunk_text(_words(25), max_words=10)
    assert [c.tokens for c in chunks] == [10, 10, 5]
    assert " ".join(c.text for c in chunks) == _words(25)


def test_cjk_sentences_split_at_full_width_stops():
    text = "重复的段落会降低检索质量。" * 3 + "最后一句！"
    chunks = chunk_text(text, max_words=15)
    assert [c.text for c in chunks] == ["重复的段落会降低检索质量。"] * 3 + ["最后一句！"]
    assert len({c.chunk_id for c in chunks}) == 4  # equal chunks are told apart by occurrence


def test_chunk_id_comes_from_content_not_position():
    edited = DOC.replace("## Install\n", "## Install\nA new first paragraph about prerequisites.\n\n", 1)
    before = {c.text: c.chunk_id for c in chunk_text(DOC, scope="http://h/guide")}
    after = {c.text: c.chunk_id for c in chunk_text(edited, scope="http://h/guide")}
    unchanged = set(before) & set(after)
    assert len(unchanged) == 3  # every chunk but the edited section's
    assert all(before[t] == after[t] for t in unchanged)


def test_chunk_id_depends_on_the_document_scope():
    a = chunk_text(DOC, scope="http://h/a")
    b = chunk_text(DOC, scope="http://h/b")
    assert [c.content_hash for c in a] == [c.content_hash for c in b]
    assert not {c.chunk_id for c in a} & {c.chunk_id for c in b}
    assert a[0].chunk_id == chunk_id("http://h/a", a[0].content_hash, 0)


def test_content_hash_is_the_page_level_hash_of_the_chunk():
    for chunk in chunk_text(DOC):
        assert chunk.content_hash == content_hash(chunk.text)


def test_given_heading_spans_replace_markdown_detection():
    text = "Installing Harbor\nRequirements\nPython 3.10 or newer.\nContainers\nOne image."
    spans = []
    for title, level in (("Installing Harbor", 1), ("Requirements", 2), ("Containers", 2)):
        start = text.index(title + "\n")
        spans.append(Heading(start, start + len(title), level, title))
    chunks = chunk_text(text, headings=spans)
    assert [(c.heading, c.text) for c in chunks] == [
        (("Installing Harbor", "Requirements"), "Python 3.10 or newer."),
        (("Installing Harbor", "Containers"), "One image."),
    ]


def test_bad_heading_spans_are_ignored_not_fatal():
    text = "alpha beta\ngamma delta"
    chunks = chunk_text(text, headings=[Heading(5, 500, 1, "x"), Heading(8, 3, 2, "y")])
    assert "".join(c.text for c in chunks).replace("\n", "") == text.replace("\n", "")


def test_a_text_of_headings_only_keeps_its_headings_as_chunks():
    chunks = chunk_text("# One\n## Two")
    assert [c.text for c in chunks] == ["# One\n## Two"]


def test_markdown_headings_levels_and_closing_hashes():
    assert [(h.level, h.title) for h in markdown_headings("#NoSpace\n  ### Deep ###\n####### seven")] == [(3, "Deep")]


def test_overlap_defaults_to_zero_and_repeats_tail_units_when_asked():
    assert DEFAULT_CHUNK_OVERLAP == 0
    lines = "\n".join(_words(10, f"l{i}x") for i in range(4))
    plain = chunk_text(lines, max_words=20)
    overlapped = chunk_text(lines, max_words=20, overlap=10)
    assert [c.tokens for c in plain] == [20, 20]
    assert len(overlapped) == 3 and overlapped[1].text.startswith("l1x0")


def test_invalid_settings_are_rejected_with_the_value():
    with pytest.raises(ValueError, match="max_words"):
        chunk_text("x", max_words=0)
    with pytest.raises(ValueError, match="overlap"):
        chunk_text("x", max_words=5, overlap=5)


def test_empty_and_blank_texts_have_no_chunks():
    assert chunk_text("") == [] and chunk_text(" \n\n\t") == []


def test_params_record_the_tokenizer():
    from scrapy_dedup.core.text import TOKENIZER_VERSION

    assert CHUNK_PARAMS["tokenizer_version"] == TOKENIZER_VERSION


_texts = st.lists(
    st.sampled_from(list("ab cd.ef!\n\n# 重复。é\u00a0,") + ["## ", "\u200b", "word "]), max_size=120
).map("".join)


@settings(max_examples=300, deadline=None)
@given(_texts, st.integers(min_value=3, max_value=40))
@example("a!a a\n。\na", 3)  # a line of 0 tokens at the cap: never carried into the next chunk
def test_chunks_are_in_order_within_the_cap_and_slice_the_text(text, cap):
    chunks = chunk_text(text, max_words=cap)
    pos = 0
    for c in chunks:
        assert text[c.start : c.end] == c.text
        assert c.start >= pos and c.end > c.start
        assert 0 < c.tokens == token_count(c.text) <= cap
        pos = c.end
    assert chunks == chunk_text(text, max_words=cap)  # deterministic


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
@example("00\x1b0:0\u00af{0\u0e0000:0{0")  # NFKC widens U+00AF: a run is cut between tokens, not chars
@example("0\x1b0\x1b0\u00a8\u00b40\u00b8\u02d8\u02d8\x1b0")  # NFKC makes U+00B4 a combining mark that joins the next 0
@example("co\u200bop" * 6)  # a zero-width space joins its neighbours: no cut between them
def test_chunker_never_raises_and_loses_no_token(text):
    chunks = chunk_text(text, max_words=8)
    covered = sum(c.tokens for c in chunks)
    headings = sum(token_count(text[h.start : h.end]) for h in markdown_headings(text))
    assert covered in (token_count(text) - headings, token_count(text))
