"""Canonical text and tokens: the single definition every fingerprint is computed from.

Pure functions, no I/O. Changing anything here changes fingerprints, so
``TOKENIZER_VERSION`` (recorded in ``FINGERPRINT_PARAMS``) must be bumped with it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

import numpy as np

__all__ = ["TOKENIZER_VERSION", "canonical_text", "token_count", "tokenize"]

#: Bump whenever canonical_text() or tokenize() output changes for any input.
#: 2: tokens are runs of word characters, punctuation dropped (1 kept it attached to words).
TOKENIZER_VERSION = 2

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
# Combining marks that re's \w leaves out (it takes only letters, digits and "_"): without them
# an Indic or Hebrew word would break at every vowel sign. Latin accents are already composed
# by NFKC.
_MARKS = (
    "\u0300-\u036f\u0483-\u0489\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7"
    "\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06dc\u06df-\u06e4\u06e7\u06e8\u06ea-\u06ed"
    "\u0900-\u0903\u093a-\u094f\u0951-\u0957\u0962\u0963\u0981-\u0983\u09bc-\u09d7\u09e2\u09e3"
    "\u0a01-\u0a03\u0a3c-\u0a51\u0a70\u0a71\u0a75\u0a81-\u0a83\u0abc-\u0acd\u0ae2\u0ae3"
    "\u0b01-\u0b03\u0b3c-\u0b57\u0b62\u0b63\u0b82\u0bbe-\u0bcd\u0bd7\u0c00-\u0c04\u0c3c-\u0c56"
    "\u0c62\u0c63\u0c81-\u0c83\u0cbc-\u0cd6\u0ce2\u0ce3\u0d00-\u0d03\u0d3b\u0d3c\u0d3e-\u0d4d"
    "\u0d57\u0d62\u0d63\u0d81-\u0d83\u0dca-\u0ddf\u0df2\u0df3"
    "\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20f0\ufe00-\ufe0f\ufe20-\ufe2f"
)
# A token is either one code point of such a script, or a maximal run of word characters
# (letters, digits, "_" and combining marks). Punctuation and symbols are not part of any token:
# with them attached, `std::iter::Chain` and `core::iter::Chain` are one whole differing token,
# and on signature-heavy pages the shingle sets disagree far more than the words do
# (benchmarks/quality_code.py). Exact hashes still see every character (canonical_text).
_TOKEN_RE = re.compile(rf"[{_NO_SPACE_SCRIPTS}]|(?:[^\W{_NO_SPACE_SCRIPTS}]|[{_MARKS}])+")
# ASCII bytes that are not word characters, mapped to a space: on ASCII text, splitting the
# translated bytes on whitespace gives exactly the regex's tokens, at C speed.
_ASCII_WORD = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
_NON_WORD_TO_SPACE = bytes(b if (b in _ASCII_WORD or b >= 0x80) else 0x20 for b in range(256))
_NO_SPACE_RE = re.compile(rf"[{_NO_SPACE_SCRIPTS}]")  # the fast path's premise, checked in tests
# The words of the word-shingle Jaccard that defines a near duplicate (the MinHash estimates it):
# runs of word characters, as written, a combining mark ending one; a character of a script
# without spaces is one word, as it is one token (a run of them between punctuation, a whole
# clause, made one edited character a change of up to 5 clauses' shingles). On text without
# combining marks they are the tokens.
_WORD_RE = re.compile(rf"[{_NO_SPACE_SCRIPTS}]|[^\W{_NO_SPACE_SCRIPTS}]+")
_MARK_RE = re.compile(rf"[{_MARKS}]")
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
# Lead bytes of the UTF-8 of every character that lower() leaves alone but casefold() changes
# (ß ŉ ſ ǰ ς ϐ ẖ ﬀ ..., 182 code points; U+00B5 MICRO SIGN too, but NFKC has already made it
# U+03BC). Lower-cased text without them is already casefolded, because casefold(x) ==
# casefold(lower(x)) for every code point (checked exhaustively in tests/test_text.py).
# C3 is the lead byte of common letters (é, ö) and of ß alone among these: checked separately.
_CASEFOLD_BYTES = bytes([0xC3, 0xC5, 0xC7, 0xCD, 0xCE, 0xCF, 0xD6, 0xE1, 0xEA, 0xEF])
_NOT_CASEFOLD_BYTES = bytes(sorted(set(range(256)) - set(_CASEFOLD_BYTES)))
# Lead bytes of every character that can compose with the character before it (combining
# marks, Hangul vowels and finals, Indic and kana signs). Case mapping can only break NFKC by
# producing one of them (e.g. "J" + caron lower-cases to a composable "j" + caron), so without
# them the second NFKC check is skipped. Derived from the Unicode data in tests/test_text.py.
_COMPOSING_BYTES = bytes([0xCC, 0xCD, 0xD9, 0xE0, 0xE1, 0xE3, 0xF0])
_NOT_COMPOSING_BYTES = bytes(sorted(set(range(256)) - set(_COMPOSING_BYTES)))
_NOT_NOTABLE_BYTES = bytes(
    sorted(set(range(256)) - set(_SLOW_BYTES) - set(_CASEFOLD_BYTES) - set(_COMPOSING_BYTES))
)


def _encode(text: str) -> tuple[str, bytes]:
    try:
        return text, text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates cannot be hashed as UTF-8: make them U+FFFD
        text = _SURROGATE_RE.sub("\ufffd", text)
        return text, text.encode("utf-8")


def _fold(text: str) -> tuple[str, bytes, bool]:
    """Return ``(folded, utf8, simple)``: the text NFKC-normalised, casefolded, with invisible
    characters dropped and lone surrogates replaced by U+FFFD (whitespace untouched), its UTF-8,
    and whether ``utf8.split()`` gives exactly the UTF-8 tokens (no script without spaces, no
    whitespace that bytes.split() misses).

    Shared by canonical_text and the fingerprints, and ordered so that the common cases skip
    the expensive steps: profiling a straightforward version on real pages found most of its
    time in str.translate, casefold(), NFKC of text that only needed NBSP replaced, and regex
    scans.
    """
    if text.isascii():  # O(1) flag check; ASCII is NFKC and lower() == casefold() on it
        folded = text.lower()
        encoded = folded.encode("ascii")
        return folded, encoded, not encoded.translate(None, _NOT_SLOW_BYTES)
    if "\xa0" in text:  # NBSP is often the only thing NFKC would change
        text = text.replace("\xa0", " ")
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    folded, encoded = _encode(text.lower())  # 2x faster than casefold(), and usually the same
    # One scan for every lead byte any later step cares about; Latin-script text has none
    # (its accents, dashes and quotes use other lead bytes), and then every step is skipped.
    notable = encoded.translate(None, _NOT_NOTABLE_BYTES)
    if notable:
        special = notable.translate(None, _NOT_CASEFOLD_BYTES)
        if special.strip(b"\xc3") or (special and b"\xc3\x9f" in encoded):
            folded, encoded = _encode(text.casefold())
            notable = encoded.translate(None, _NOT_NOTABLE_BYTES)
    recheck = bool(notable.translate(None, _NOT_COMPOSING_BYTES))
    for ch in _INVISIBLE_CHARS:
        if ch in folded:  # removing them can bring a mark next to its base, or out of order
            folded, encoded = _encode(_INVISIBLE_RE.sub("", folded))
            recheck = True
            break
    if recheck and not unicodedata.is_normalized("NFKC", folded):
        folded, encoded = _encode(unicodedata.normalize("NFKC", folded))
        notable = encoded.translate(None, _NOT_NOTABLE_BYTES)
    simple = not notable.translate(None, _NOT_SLOW_BYTES) and not any(ch in folded for ch in _UNICODE_SPACES)
    return folded, encoded, simple


def _token_bytes(text: str) -> list[bytes]:
    """``[t.encode() for t in tokenize(canonical_text(text))]``, faster: most pages never
    build the canonical string or a str per token."""
    folded, encoded, simple = _fold(text)
    return _tokens_of(folded, encoded, simple)


def _tokens_of(folded: str, encoded: bytes, simple: bool) -> list[bytes]:
    if simple:
        parts = encoded.translate(_NON_WORD_TO_SPACE).split()
        if folded.isascii():
            return parts
        # Non-ASCII letters (é, ж) are word characters, non-ASCII punctuation (— “ …) is not:
        # only the parts holding such bytes need the regex.
        out: list[bytes] = []
        for part in parts:
            if part.isascii():
                out.append(part)
            else:
                out.extend(token.encode("utf-8") for token in _TOKEN_RE.findall(part.decode("utf-8")))
        return out
    return [token.encode("utf-8") for token in _TOKEN_RE.findall(folded)]


def _words_of(folded: str, tokens: list[bytes]) -> list[bytes]:
    """The words of folded text (see _WORD_RE), given its tokens."""
    if folded.isascii() or _MARK_RE.search(folded) is None:
        return tokens  # no combining mark: the same runs
    return [word.encode("utf-8") for word in _WORD_RE.findall(folded)]


def _word_bytes(text: str) -> list[bytes]:
    """The UTF-8 of the words of ``text``: ``\\w+`` runs of its canonical form, but one word
    per character of a script without spaces (unlike :func:`tokenize`, a combining mark ends a
    word)."""
    folded, encoded, simple = _fold(text)
    return _words_of(folded, _tokens_of(folded, encoded, simple))


def _canonical_token_bytes(text: str) -> tuple[bytes, list[bytes], int, list[bytes]]:
    """``(utf8 of canonical_text(text), _token_bytes(text), len(canonical_text(text)),
    _word_bytes(text))``."""
    folded, encoded, simple = _fold(text)
    tokens = _tokens_of(folded, encoded, simple)
    words = _words_of(folded, tokens)
    if simple:
        canonical = b" ".join(encoded.split())
        return canonical, tokens, len(canonical) if folded.isascii() else len(canonical.decode("utf-8")), words
    canonical_str = " ".join(folded.split())
    return canonical_str.encode("utf-8"), tokens, len(canonical_str), words


# -- many texts at once -----------------------------------------------------------------------
#
# canonical_text() costs ~30 us for 2 KB of text, most of it in str.split() and " ".join()
# building a str per word. For a batch of texts (retrieved hits), the same result is computed
# over their concatenated UTF-8 with a few passes of bytes.translate and numpy; each text only
# has to show that folding would change nothing in it but its ASCII letters.

# ASCII bytes as folding and str.split() see them: letters lower-cased, every ASCII whitespace
# (str.split() also splits on U+001C..U+001F) a space.
_ASCII_FOLD = bytes(
    0x20 if b in (0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F) else b + 32 if 0x41 <= b <= 0x5A else b
    for b in range(256)
)
_ASCII_BYTES = bytes(range(0x80))
_GROUP_BYTES = 1 << 17
# Non-ASCII characters met so far, by whether folding leaves them alone wherever they stand
# (see _stable). NBSP counts as stable: folding only makes it a space, which the batch does.
_STABLE_CHARS: set[str] = {"\xa0"}
_UNSTABLE_CHARS: set[str] = set()
_REMEMBER_CHARS = 1 << 16  # a text of every code point must not grow them without bound


def _stable(ch: str) -> bool:
    """Whether folding leaves ``ch`` unchanged in every context: not whitespace, not invisible,
    not a surrogate, unchanged by NFKC, lower() and casefold(), and a starter that no character
    before it can compose with (tests/test_text.py checks this against every canonical
    composition). Then a text whose non-ASCII characters are all stable folds to itself with
    its ASCII letters lower-cased."""
    code = ord(ch)
    if ch.isspace() or ch in _INVISIBLE_CHARS or 0xD800 <= code <= 0xDFFF:
        return False
    if 0x1100 <= code <= 0x11FF or 0xA960 <= code <= 0xA97F or 0xD7B0 <= code <= 0xD7FF:
        return False  # Hangul jamo compose algorithmically, not through the decomposition table
    if unicodedata.combining(ch) or unicodedata.category(ch).startswith("M"):
        return False
    return unicodedata.normalize("NFKC", ch) == ch and ch.lower() == ch and ch.casefold() == ch


def _all_stable(chars: set[str]) -> bool:
    if chars <= _STABLE_CHARS:
        return True
    if chars & _UNSTABLE_CHARS:
        return False
    verdict = True
    remember = len(_STABLE_CHARS) + len(_UNSTABLE_CHARS) < _REMEMBER_CHARS
    for ch in chars - _STABLE_CHARS:  # each character is judged once per process
        if _stable(ch):
            if remember:
                _STABLE_CHARS.add(ch)
        else:
            if remember:
                _UNSTABLE_CHARS.add(ch)
            verdict = False
    return verdict


def _folded_utf8(text: str, encoded: bytes | None = None) -> bytes:
    """UTF-8 whose canonical form, as the batch computes it (NBSP a space, ASCII letters
    lower-cased, ASCII whitespace collapsed, ends stripped), is canonical_text(text)."""
    if encoded is None:
        try:
            encoded = text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: the slow path replaces them
            return canonical_text(text).encode("utf-8")
    if text.isascii() or _all_stable(set(encoded.translate(None, _ASCII_BYTES).decode("utf-8"))):
        return encoded
    folded, encoded, simple = _fold(text)
    # Simple folded text has ASCII whitespace only; otherwise (U+2028, U+0085, ...) str.split()
    # decides, and canonical text passes through the batch unchanged.
    return encoded if simple else " ".join(folded.split()).encode("utf-8")


def _collapse(joined: bytes) -> list[bytes]:
    """The batch's passes over texts joined by NUL: ASCII folded, NBSP and each whitespace
    run one space, no space at either end of a text; split at the NULs."""
    folded = joined.translate(_ASCII_FOLD)
    data = np.frombuffer(folded, dtype=np.uint8)
    changed = False  # NBSPs replaced in a copy of data, which folded does not have
    lead = np.flatnonzero(data[:-1] == 0xC2)  # C2 only ever leads a character: C2 A0 is NBSP
    if len(lead):
        nbsp = lead[data[lead + 1] == 0xA0]
        if len(nbsp):  # only texts of stable characters still hold NBSP: two spaces, collapsed below
            data = data.copy()
            data[nbsp] = data[nbsp + 1] = 0x20
            changed = True
    space = data == 0x20
    runs = space[1:] & space[:-1]
    if runs.any():  # a boolean compress costs ~3 ns a byte: only when there is a run to shorten
        keep = np.empty(len(data), dtype=bool)
        keep[0] = True
        np.logical_not(runs, out=keep[1:])
        folded = data[keep].tobytes()
    elif changed:
        folded = data.tobytes()
    return [piece.strip(b" ") for piece in folded.split(b"\x00")]


def _canonical_batch(texts: Sequence[str]) -> list[bytes]:
    """``[canonical_text(t).encode("utf-8") for t in texts]``, several times faster on a batch
    (tested equal on arbitrary Unicode)."""
    out: list[bytes] = []
    start = size = 0
    for end, text in enumerate(texts, 1):  # in groups of ~128 K characters: the passes stay in the CPU's cache
        size += len(text) + 1
        if size >= _GROUP_BYTES or end == len(texts):
            out += _canonical_group(texts[start:end])
            start, size = end, 0
    return out


def _canonical_group(texts: Sequence[str]) -> list[bytes]:
    try:
        parts = [text.encode("utf-8") for text in texts]
    except UnicodeEncodeError:
        parts = [_folded_utf8(text) for text in texts]
    else:
        wide = [i for i, text in enumerate(texts) if not text.isascii()]
        # Most batches hold a few distinct non-ASCII characters, all stable: one check for all.
        if wide and not _all_stable(set(b"".join(parts[i] for i in wide).translate(None, _ASCII_BYTES).decode())):
            for i in wide:
                parts[i] = _folded_utf8(texts[i], parts[i])
    pieces = _collapse(b"\x00".join(parts))
    if len(pieces) == len(parts):
        return pieces
    # A text holds NUL, the separator: those are canonicalized one by one.
    alone = {i: canonical_text(texts[i]).encode("utf-8") for i, part in enumerate(parts) if b"\x00" in part}
    clean = [i for i in range(len(parts)) if i not in alone]
    collapsed = dict(zip(clean, _collapse(b"\x00".join(parts[i] for i in clean)) if clean else ()))
    return [alone[i] if i in alone else collapsed[i] for i in range(len(parts))]


def canonical_text(text: str) -> str:
    """Return the form of ``text`` that exact hashes and shingles are computed from.

    Zero-width characters (U+200B..U+200D, U+2060, U+FEFF incl. a BOM) and soft hyphens are
    dropped; NFKC folds NFD/NFC, ligatures, full-width forms and NBSP; case is folded
    (casefold, so "Straße" == "STRASSE"); every whitespace run, line breaks included, becomes
    one space, and the ends are stripped. Line breaks do not survive on purpose: extractors
    disagree on paragraph breaks between versions, and the words are what make a page.
    Digits and punctuation are kept, so two price tables never become one. Lone surrogates
    become U+FFFD, so the result always encodes as UTF-8. Idempotent; never raises.

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
    """Split canonical text into tokens: runs of word characters (letters, digits, "_",
    combining marks), and one token per character for scripts written without spaces (Han,
    kana, Thai, ...). Punctuation and symbols separate tokens and are dropped.

    Expects the output of :func:`canonical_text`; other text is tokenized the same way but
    will not match the tokens of its canonical form.

    >>> tokenize("the disk was full, again!")
    ['the', 'disk', 'was', 'full', 'again']
    >>> tokenize("impl<a, b> iterator for std::iter::chain<a, b>")
    ['impl', 'a', 'b', 'iterator', 'for', 'std', 'iter', 'chain', 'a', 'b']
    >>> tokenize("去重是rag管线 v2 の必須。")
    ['去', '重', '是', 'rag', '管', '线', 'v2', 'の', '必', '須']
    >>> tokenize("")
    []
    """
    return _TOKEN_RE.findall(canonical)


def token_starts(text: str) -> list[int]:
    """Where each token of ``text`` begins, as written (not canonicalized): the places a run
    without spaces can be cut without cutting a token.

    A start is left out when folding would join its token to the one before (a zero-width
    space between them, or a spacing accent that NFKC turns into a combining mark): cutting
    there would count one canonical token twice.

    >>> token_starts("std::iter::Chain")
    [0, 5, 11]
    >>> token_starts("co\u200bop \u00b4x")
    [0]
    """
    matches = list(_TOKEN_RE.finditer(text))
    starts = [m.start() for m in matches[:1]]
    for before, m in zip(matches, matches[1:]):
        span = text[before.start() : m.end()]
        if span.isascii() or len(_token_bytes(span)) == len(_token_bytes(text[before.start() : m.start()])) + len(
            _token_bytes(text[m.start() : m.end()])
        ):
            starts.append(m.start())
    return starts


def canonical_and_count(text: str) -> tuple[bytes, int]:
    """``(canonical_text(text).encode(), token_count(text))``, with one pass of folding (a
    paragraph's key and a chunk's hash need both).

    >>> canonical_and_count("The disk was  FULL, again!")
    (b'the disk was full, again!', 5)
    """
    canonical, tokens, _, _ = _canonical_token_bytes(text)
    return canonical, len(tokens)


def token_count(text: str) -> int:
    """Number of tokens the fingerprints see in ``text`` (canonicalized, then tokenized): the
    unit of every size limit (minimum tokens for near matching, chunk sizes).

    >>> token_count("The disk was  FULL, again! -- 42")
    6
    """
    return len(_token_bytes(text))
