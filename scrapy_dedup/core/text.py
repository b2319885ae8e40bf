"""Canonical text and tokens: the single definition every fingerprint is computed from.

Pure functions, no I/O. Changing anything here changes fingerprints, so
``TOKENIZER_VERSION`` (recorded in ``FINGERPRINT_PARAMS``) must be bumped with it.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["TOKENIZER_VERSION", "canonical_text", "tokenize"]

#: Bump whenever canonical_text() or tokenize() output changes for any input.
TOKENIZER_VERSION = 1

# Invisible characters that editors, CMSs and copy/paste insert at random:
# ZWSP, ZWNJ, ZWJ, WORD JOINER, BOM / ZWNBSP, SOFT HYPHEN. NFKC keeps them, so drop them explicitly.
_INVISIBLE = "\u200b-\u200d\u2060\ufeff\u00ad"

# Scripts written without spaces between words. One code point per token keeps a Chinese,
# Japanese or Thai page from being a single giant "word" (which would make every edit a total change).
_NO_SPACE_SCRIPTS = (
    "\u0e00-\u0e7f"  # Thai
    "\u0e80-\u0eff"  # Lao
    "\u0f00-\u0fff"  # Tibetan (tsheg-delimited, no spaces)
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff\u19e0-\u19ff"  # Khmer, Khmer symbols
    "\u1a20-\u1aaf"  # Tai Tham
    "\u3005-\u3007\u3021-\u3029\u3038-\u303c"  # ideographic iteration marks and numerals
    "\u3040-\u30ff"  # Hiragana, Katakana (incl. the prolonged sound mark)
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua000-\ua4cf"  # Yi
    "\ua9e0-\ua9ff\uaa60-\uaa7f"  # Myanmar extensions
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003134f"  # CJK extensions B..G
)
# A token is either one code point of such a script, or a maximal run of anything else that is
# not whitespace (re's \s and str.split() agree on what whitespace is). Punctuation stays
# attached to its word, as in Broder's w-shingling (see benchmarks/quality.py for the measurement).
_TOKEN_RE = re.compile(rf"[{_NO_SPACE_SCRIPTS}]|[^\s{_NO_SPACE_SCRIPTS}]+")
_NO_SPACE_RE = re.compile(rf"[{_NO_SPACE_SCRIPTS}]")
_INVISIBLE_RE = re.compile(rf"[{_INVISIBLE}]")
_INVISIBLE_CHARS = ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
# UTF-8 bytes that may start a character of a script above (all of them are encoded with one of
# these lead bytes) or that bytes.split() would not treat as whitespace although str.split()
# does (U+001C..U+001F). Deleting everything else with bytes.translate is the fastest way to
# ask "any of these?": ~10x faster than a regex character-class search over the text.
_SLOW_BYTES = bytes([0x1C, 0x1D, 0x1E, 0x1F, 0xE0, 0xE1, *range(0xE3, 0xF5)])
_NOT_SLOW_BYTES = bytes(sorted(set(range(256)) - set(_SLOW_BYTES)))
# Whitespace after NFKC that str.split() knows and bytes.split() does not (besides U+001C..F,
# and U+1680 whose lead byte E1 is in _SLOW_BYTES).
_UNICODE_SPACES = ("\x85", "\u2028", "\u2029")


def _fold(text: str) -> tuple[str, bytes, bool]:
    """Return ``(folded, utf8, simple)``: the text NFKC-normalised, casefolded, with invisible
    characters dropped and lone surrogates replaced by U+FFFD (whitespace untouched), its UTF-8,
    and whether ``utf8.split()`` gives exactly the UTF-8 tokens (no script without spaces, no
    whitespace that bytes.split() misses).

    Shared by canonical_text and the fingerprints, and ordered so that the common cases skip
    the expensive steps: profiling a straightforward version on real pages found most of its
    time in str.translate, NFKC of text that only needed NBSP replaced, and regex scans.
    """
    if text.isascii():  # O(1) flag check; ASCII is NFKC and lower() == casefold() on it
        folded = text.lower()
        encoded = folded.encode("ascii")
        return folded, encoded, not encoded.translate(None, _NOT_SLOW_BYTES)
    if "\xa0" in text:  # NBSP is often the only thing NFKC would change
        text = text.replace("\xa0", " ")
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    text = text.casefold()
    for ch in _INVISIBLE_CHARS:
        if ch in text:
            text = _INVISIBLE_RE.sub("", text)
            break
    # casefold() and the removal can both leave text that is no longer NFKC (U+0345 becomes
    # U+03B9; "e<ZWSP><U+0301>" becomes a decomposed é); the quick check makes this cheap.
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates cannot be hashed as UTF-8: make them U+FFFD
        text = _SURROGATE_RE.sub("\ufffd", text)
        encoded = text.encode("utf-8")
    simple = not encoded.translate(None, _NOT_SLOW_BYTES) and not any(
        ch in text for ch in _UNICODE_SPACES
    )
    return text, encoded, simple


def _token_bytes(text: str) -> list[bytes]:
    """``[t.encode() for t in tokenize(canonical_text(text))]``, faster: most pages never
    build the canonical string or a str per token."""
    folded, encoded, simple = _fold(text)
    if simple:
        return encoded.split()  # whitespace runs only separate tokens: no need to collapse
    return [token.encode("utf-8") for token in _TOKEN_RE.findall(folded)]


def _canonical_token_bytes(text: str) -> tuple[bytes, list[bytes], int]:
    """``(utf8 of canonical_text(text), _token_bytes(text), len(canonical_text(text)))``."""
    folded, encoded, simple = _fold(text)
    if simple:
        tokens = encoded.split()
        canonical = b" ".join(tokens)
        return canonical, tokens, len(canonical.decode("utf-8"))
    canonical_str = " ".join(folded.split())
    tokens = [token.encode("utf-8") for token in _TOKEN_RE.findall(canonical_str)]
    return canonical_str.encode("utf-8"), tokens, len(canonical_str)


def canonical_text(text: str) -> str:
    """Return the form of ``text`` that exact hashes and shingles are computed from.

    Steps: drop zero-width characters and soft hyphens; NFKC (folds NFD/NFC, ligatures,
    full-width forms, NBSP to space); casefold; collapse every whitespace run, line breaks
    included, into one space and strip. Line breaks do not survive on purpose: extractors
    disagree on paragraph breaks between versions, and the words are what make a page.
    Digits and punctuation are kept, so two price tables never become one. Idempotent.

    >>> canonical_text("  Caf\\u0065\\u0301 \\u00a0 MENU\\r\\n\\r\\nPrix:\\u200b 4,50\\u00a0€ ")
    'café menu prix: 4,50 €'
    >>> canonical_text("\\ufeffco\\u00adoperate") == canonical_text("cooperate")
    True
    >>> canonical_text("Straße") == canonical_text("STRASSE")
    True
    """
    # str.split() with no argument splits on every Unicode whitespace (incl. U+2028, U+3000).
    return " ".join(_fold(text)[0].split())


def tokenize(canonical: str) -> list[str]:
    """Split canonical text into tokens: whitespace-delimited words with their punctuation,
    and one token per character for scripts written without spaces (Han, kana, Thai, ...).

    Expects the output of :func:`canonical_text`; other text is tokenized the same way but
    will not match the tokens of its canonical form.

    >>> tokenize("the disk was full, again!")
    ['the', 'disk', 'was', 'full,', 'again!']
    >>> tokenize("去重是rag管线 v2 の必須")
    ['去', '重', '是', 'rag', '管', '线', 'v2', 'の', '必', '須']
    >>> tokenize("")
    []
    """
    if canonical.isascii() or _NO_SPACE_RE.search(canonical) is None:
        return canonical.split()  # same tokens as the regex, 4x faster
    return _TOKEN_RE.findall(canonical)
