"""canonical_text and tokenize: each normalisation rule, scripts without spaces, and the
invariants the fast paths in scrapy_dedup.core.text rely on."""

from __future__ import annotations

import re
import sys
import unicodedata

import pytest
from hypothesis import given, settings, strategies as st

from scrapy_dedup.core import text as T
from scrapy_dedup.core.fingerprints import content_hash
from scrapy_dedup.core.text import canonical_text, tokenize

# -- canonical_text, one rule at a time --------------------------------------------------------


def test_whitespace_runs_collapse_to_one_space_and_are_stripped():
    assert canonical_text("  a \t b\n\n\nc\u3000d\u2028e\x1cf \r\n") == "a b c d e f"


def test_line_breaks_do_not_survive():
    assert canonical_text("para one\n\npara two") == canonical_text("para one para two")


def test_crlf_and_cr_equal_lf():
    assert canonical_text("a\r\nb\rc") == canonical_text("a\nb\nc") == "a b c"


def test_case_is_folded():
    assert canonical_text("Hello WORLD") == "hello world"
    assert canonical_text("Straße") == canonical_text("STRASSE") == "strasse"
    assert canonical_text("ΟΔΟΣ") == canonical_text("οδος") == "οδοσ"  # final sigma folds too


def test_nbsp_is_a_space():
    assert canonical_text("10\u00a0kg") == "10 kg"
    assert canonical_text("a\u00a0\u00a0 b") == "a b"


def test_nfd_equals_nfc():
    nfd, nfc = "Cafe\u0301 Zu\u0308rich", "Caf\u00e9 Z\u00fcrich"
    assert canonical_text(nfd) == canonical_text(nfc) == "caf\u00e9 z\u00fcrich"


def test_compatibility_forms_fold():
    assert canonical_text("\uff21\uff22\uff23 \ufb01le") == "abc file"  # full-width, fi ligature


def test_bom_is_removed():
    assert canonical_text("\ufeffHello") == "hello"
    assert canonical_text("a\ufeffb") == "ab"


def test_zero_width_characters_are_removed():
    for ch in "\u200b\u200c\u200d\u2060":
        assert canonical_text(f"dup{ch}licate") == "duplicate"


def test_soft_hyphen_is_removed():
    assert canonical_text("hy\u00adphen\u00adation") == "hyphenation"


def test_removal_next_to_a_combining_mark_stays_normalised():
    assert canonical_text("e\u200b\u0301") == canonical_text("\u00e9")


def test_digits_and_punctuation_are_kept():
    assert canonical_text("Price: $1,000.00 (net)!") == "price: $1,000.00 (net)!"
    table_a = "Widget | 10.00 EUR\nGadget | 25.50 EUR"
    table_b = "Widget | 10.50 EUR\nGadget | 25.00 EUR"
    assert content_hash(table_a) != content_hash(table_b)
    assert content_hash("1.000") != content_hash("1,000") != content_hash("1000")


def test_lone_surrogates_become_replacement_characters():
    assert canonical_text("a\ud800b") == "a\ufffdb"
    content_hash("a\ud800b")  # hashable as UTF-8


def test_empty_and_blank():
    assert canonical_text("") == ""
    assert canonical_text(" \n\t\u200b\ufeff ") == ""


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_idempotent(s):
    once = canonical_text(s)
    assert canonical_text(once) == once


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("aAéE\u0301\u030c\u0345ßΣς \n\u00a0\u200bJı\u0130ǰ中ア")))
def test_idempotent_on_tricky_characters(s):
    once = canonical_text(s)
    assert canonical_text(once) == once


# -- tokenize --------------------------------------------------------------------------------


def test_tokens_are_word_runs_and_punctuation_is_dropped():
    assert tokenize("see section 5.2, then run vacuum;") == ["see", "section", "5", "2", "then", "run", "vacuum"]
    assert tokenize("| a | b |") == ["a", "b"]
    assert tokenize("snake_case -- x") == ["snake_case", "x"]


def test_paths_in_signatures_differ_by_one_word_not_one_token():
    std = tokenize(canonical_text("impl<A, B> Iterator for std::iter::Chain<A, B>"))
    core = tokenize(canonical_text("impl<A, B> Iterator for core::iter::Chain<A, B>"))
    assert len(std) == len(core) == 10
    assert [a == b for a, b in zip(std, core)].count(False) == 1


def test_non_ascii_letters_are_word_characters_and_non_ascii_punctuation_is_not():
    assert tokenize(canonical_text("Café — “naïve” résumé…")) == ["café", "naïve", "résumé"]
    assert tokenize(canonical_text("Привет, мир!")) == ["привет", "мир"]


def test_combining_marks_stay_inside_their_word():
    assert tokenize(canonical_text("हिन्दी भाषा")) == ["हिन्दी", "भाषा"]


def test_chinese_is_one_token_per_character():
    assert tokenize(canonical_text("去重是 RAG 管线的必须环节。")) == [
        "去", "重", "是", "rag", "管", "线", "的", "必", "须", "环", "节",
    ]  # fmt: skip


def test_japanese_kana_and_kanji_are_one_token_per_character():
    assert tokenize(canonical_text("東京タワーへ行きます v2")) == ["東", "京", "タ", "ワ", "ー", "へ", "行", "き", "ま", "す", "v2"]


def test_half_width_katakana_folds_before_tokenizing():
    assert tokenize(canonical_text("ｶﾀｶﾅ")) == ["カ", "タ", "カ", "ナ"]


def test_thai_is_not_one_giant_token():
    assert tokenize("ภาษาไทย") == list("ภาษาไทย")


def test_korean_keeps_words():
    assert tokenize("한국어 문장 입니다") == ["한국어", "문장", "입니다"]


def test_tokenize_empty():
    assert tokenize("") == []


# -- invariants of the fast paths --------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_internal_tokens_match_public_tokenize(s):
    canonical = canonical_text(s)
    tokens = [t.encode() for t in tokenize(canonical)]
    assert T._token_bytes(s) == tokens
    words = [w.encode() for w in T._WORD_RE.findall(canonical)]
    assert T._canonical_token_bytes(s) == (canonical.encode(), tokens, len(canonical), words)
    assert T._word_bytes(s) == words


def test_words_are_runs_of_word_characters():
    """The MinHash's words (the definition of a near duplicate), unlike the tokens: a combining
    mark ends a word; as with the tokens, each character of Han or kana is one word (a run of
    them between punctuation is a clause)."""
    assert T._word_bytes("去重是RAG管线 v2 の必須。") == [t.encode() for t in tokenize("去重是rag管线 v2 の必須。")]
    assert T._word_bytes("हिन्दी") == [w.encode() for w in re.findall(r"\w+", "हिन्दी")]
    assert T._word_bytes("The disk was FULL, again!") == T._token_bytes("The disk was FULL, again!")


@pytest.mark.parametrize("text", ["plain ascii\x1ctext", "caf\u00e9 \u2028 na\u00efve", "Stra\u00dfe \u0130stanbul", "x\u0085y"])
def test_internal_tokens_on_whitespace_edge_cases(text):
    canonical = canonical_text(text)
    assert T._token_bytes(text) == [t.encode() for t in tokenize(canonical)]


def _all_code_points():
    return (chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)


def test_lower_then_casefold_shortcut_is_sound():
    # _fold uses lower() unless the result holds a character casefold() would still change;
    # that is exact only if casefold(x) == casefold(lower(x)) for every x, and the lead bytes it
    # scans for cover every such character (U+00B5 aside: NFKC turns it into U+03BC first).
    special = set()
    for ch in _all_code_points():
        low = ch.lower()
        assert ch.casefold() == low.casefold(), hex(ord(ch))
        if low == ch and ch.casefold() != ch and ch != "\u00b5":
            special.add(ch)
    assert {ch.encode()[0] for ch in special} <= set(T._CASEFOLD_BYTES)
    assert [ch for ch in special if ch.encode()[0] == 0xC3] == ["\u00df"]


def test_composing_lead_bytes_cover_every_composing_character():
    # the second NFKC pass is skipped when none of these lead bytes occurs
    seconds = {chr(c) for c in range(0x1161, 0x1176)} | {chr(c) for c in range(0x11A8, 0x11C3)}  # Hangul V, T
    for ch in _all_code_points():
        decomposition = unicodedata.decomposition(ch).split()
        if len(decomposition) == 2 and not decomposition[0].startswith("<"):
            pair = "".join(chr(int(cp, 16)) for cp in decomposition)
            if unicodedata.normalize("NFC", pair) == ch:
                seconds.add(pair[1])
    assert {ch.encode()[0] for ch in seconds} <= set(T._COMPOSING_BYTES)


def test_slow_path_lead_bytes_cover_every_script_without_spaces():
    for ch in _all_code_points():
        if T._NO_SPACE_RE.match(ch):
            assert ch.encode()[0] in T._SLOW_BYTES, hex(ord(ch))


# -- many texts at once (_canonical_batch) ----------------------------------------------------

# Characters the batch treats specially, and ones that send a text down the per-text path.
_BATCH_ALPHABET = st.sampled_from(
    "aZ09 _.,-\t\n\r\x0b\x0c\x1c\x1f\x00\u00a0\u2028\u0085\u1680\u3000\u2009"  # separators and spaces
    "é→“—πø\u00c9\u00df\u0301\u200b\u00adﬁＡΣ\u0130\u1161\u11a8가中ア\ud800"  # stable and unstable characters
)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(), max_size=8))
def test_batch_equals_canonical_text_one_by_one(texts):
    assert T._canonical_batch(texts) == [canonical_text(t).encode("utf-8") for t in texts]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(alphabet=_BATCH_ALPHABET, max_size=40), max_size=8))
def test_batch_equals_canonical_text_on_whitespace_nul_and_folding(texts):
    assert T._canonical_batch(texts) == [canonical_text(t).encode("utf-8") for t in texts]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet=_BATCH_ALPHABET, min_size=1, max_size=12), st.integers(1, 20_000)),
                min_size=1, max_size=12))
def test_batch_equals_canonical_text_across_groups(parts):
    texts = [part * repeat for part, repeat in parts]  # up to ~1 MB: several groups of _GROUP_BYTES
    assert T._canonical_batch(texts) == [canonical_text(t).encode("utf-8") for t in texts]


def test_stable_characters_fold_to_themselves_next_to_anything():
    # The batch leaves a text of ASCII and stable characters as it is but for its ASCII letters:
    # exact only if no stable character is folded, is whitespace, or composes with the one before.
    seconds = {chr(c) for c in range(0x1161, 0x1176)} | {chr(c) for c in range(0x11A8, 0x11C3)}  # Hangul V, T
    for ch in _all_code_points():
        decomposition = unicodedata.decomposition(ch).split()
        if len(decomposition) == 2 and not decomposition[0].startswith("<"):
            pair = "".join(chr(int(cp, 16)) for cp in decomposition)
            if unicodedata.normalize("NFC", pair) == ch:
                seconds.add(pair[1])
    stable = [ch for ch in _all_code_points() if ord(ch) > 0x7F and T._stable(ch)]
    assert len(stable) > 100_000  # most of Unicode: letters without case, symbols, CJK
    assert not [hex(ord(ch)) for ch in stable if ch in seconds or ch.isspace() or unicodedata.combining(ch)]
    assert not [ch for ch in seconds if ch.isascii()]  # nor does an ASCII character compose with one
    # next to ASCII letters, to itself, to the stable characters around it in code point order
    text = " ".join(f"A{ch}{ch}b{ch}" for ch in stable) + "".join(stable)
    assert canonical_text(text) == text.replace("A", "a")


def test_batch_of_nothing_and_of_empty_texts():
    assert T._canonical_batch([]) == []
    assert T._canonical_batch(["", " ", "\n\u00a0\n"]) == [b"", b"", b""]


@given(st.text() | st.text(alphabet=st.sampled_from("aAéE\u0301\u00a0\u200b\u3000\u2028\x1cß中ア ,.\n")))
@settings(max_examples=300, deadline=None)
def test_canonical_and_count_is_the_canonical_text_and_the_token_count(text):
    """A paragraph's key and a chunk's hash fold the text once for both."""
    assert T.canonical_and_count(text) == (canonical_text(text).encode("utf-8"), T.token_count(text))
