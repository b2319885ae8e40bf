"""Whether two texts are in the same language, judged without a language model.

A translation shares the commands, paths and output it does not translate with its original,
and little else: by its word shingles it can look like a rewrite of it. Two texts are taken to
be in one language when their letters are in the same scripts, in about the same shares
(Latin, Cyrillic, Arabic, Han, kana, Hangul...: the first word of each letter's Unicode name),
and their most frequent short words overlap (a stop-word profile each text gives of itself: "the
of to and" against "de la le et" against "och att det"). Pure and dependency-free.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

__all__ = ["LanguageProfile", "language_profile", "same_language", "translated"]

#: letters looked at for the script shares (spread over the text)
_SCRIPT_SAMPLE = 2000
#: the most frequent words of at most _SHORT letters make the stop-word profile
_PROFILE_WORDS = 20
_SHORT = 4
#: script shares further apart than this (total variation) are two languages
MAX_SCRIPT_DISTANCE = 0.3
#: stop-word profiles overlapping less than this (share of occurrences) are two languages
MIN_PROFILE_OVERLAP = 0.3
#: a profile needs this many short-word occurrences to say anything
_MIN_OCCURRENCES = 20
#: characters of words of its own each text needs before it can be a translation of the other
_MIN_RESIDUE = 200
_WORD = re.compile(r"[^\W\d_]+")
#: ASCII bytes that are not letters, mapped to a space (bytes beyond ASCII kept)
_ASCII_LETTERS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_NON_LETTER_TO_SPACE = bytes(b if b in _ASCII_LETTERS or b >= 0x80 else 0x20 for b in range(256))


@dataclass(frozen=True, slots=True)
class LanguageProfile:
    scripts: dict[str, float]  #: script -> share of the letters
    words: dict[str, float]  #: frequent short word -> share of the short-word occurrences
    occurrences: int  #: short-word occurrences counted


def _script(ch: str) -> str:
    name = unicodedata.name(ch, "")
    first = name.split(" ", 1)[0].split("-", 1)[0]  # KATAKANA-HIRAGANA (the long-vowel mark): kana
    return "HAN" if first == "CJK" else first


def language_profile(text: str) -> LanguageProfile:
    """The script shares and stop-word profile of ``text`` (NFKC, casefolded).

    >>> p = language_profile("Le fichier de configuration est lu par le service au démarrage.")
    >>> p.scripts
    {'LATIN': 1.0}
    >>> sorted(language_profile("設定ファイルはサービスの起動時に読み込まれます").scripts)
    ['HAN', 'HIRAGANA', 'KATAKANA']
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    letters = [ch for ch in text if ch.isalpha()]
    step = max(1, len(letters) // _SCRIPT_SAMPLE)
    sample = Counter(_script(ch) for ch in letters[::step])
    total = sum(sample.values()) or 1
    short = Counter(w for w in _WORD.findall(text) if len(w) <= _SHORT)
    occurrences = sum(short.values())
    top = short.most_common(_PROFILE_WORDS)
    mass = sum(n for _, n in top) or 1
    return LanguageProfile(
        {s: n / total for s, n in sample.items()}, {w: n / mass for w, n in top}, occurrences
    )


def same_language(a: str | LanguageProfile, b: str | LanguageProfile) -> bool:
    """Whether two texts read as one language: their scripts in about the same shares and,
    when both have enough short words, stop-word profiles that overlap.

    >>> en = "The service reads the configuration file when it starts, and the file lists the ports to open. " * 3
    >>> fr = "Le service lit le fichier de configuration au démarrage, et le fichier liste les ports à ouvrir. " * 3
    >>> same_language(en, en.replace("ports", "sockets")), same_language(en, fr)
    (True, False)
    >>> same_language(en, "サービスは起動時に設定ファイルを読み込み、そのファイルには開くポートが書かれています。" * 3)
    False
    """
    pa = a if isinstance(a, LanguageProfile) else language_profile(a)
    pb = b if isinstance(b, LanguageProfile) else language_profile(b)
    scripts = set(pa.scripts) | set(pb.scripts)
    distance = sum(abs(pa.scripts.get(s, 0.0) - pb.scripts.get(s, 0.0)) for s in scripts) / 2
    if distance > MAX_SCRIPT_DISTANCE:
        return False
    if min(pa.occurrences, pb.occurrences) < _MIN_OCCURRENCES:
        return True  # too few short words to tell (no-space scripts, code): the scripts decide
    overlap = sum(min(share, pb.words.get(word, 0.0)) for word, share in pa.words.items())
    return overlap >= MIN_PROFILE_OVERLAP


def _words(text: str) -> list[str]:
    """The words (runs of letters) of ``text`` after NFKC and casefold: ``_WORD.findall``, with
    ASCII punctuation, digits and spaces made spaces and split away in C first; only a part with
    characters beyond ASCII needs the regex."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    encoded = folded.encode("utf-8", "surrogatepass").translate(_NON_LETTER_TO_SPACE)
    parts = encoded.decode("utf-8", "surrogatepass").split()
    if folded.isascii():
        return parts
    return [word for part in parts for word in ([part] if part.isascii() else _WORD.findall(part))]


def translated(a: str, b: str) -> bool:
    """Whether ``b`` reads as a translation of ``a`` (or the other way round): the words each
    has that the other lacks are in different languages (:func:`same_language`). What two
    translations share (commands, paths, names) is left out, so a partly translated page is
    judged by its translated part; an untranslated copy, or a page edited in its own language,
    is not a translation.

    >>> en = "Run the backup command every night, then check that the archive is complete. " * 4
    >>> fr = "Lancez la commande de sauvegarde chaque nuit, puis vérifiez que l'archive est complète. " * 4
    >>> translated(en + " backup --all /srv", fr + " backup --all /srv"), translated(en, en + " Then rest.")
    (True, False)
    """
    wa, wb = _words(a), _words(b)
    sa, sb = set(wa), set(wb)
    only_a, only_b = " ".join(w for w in wa if w not in sb), " ".join(w for w in wb if w not in sa)
    if min(len(only_a), len(only_b)) < _MIN_RESIDUE:
        return False  # one side adds or changes too little to be a translation of the other
    pa, pb = language_profile(only_a), language_profile(only_b)
    if not same_language(pa, pb):
        return True
    # A partial translation keeps its original's short words in the lines it left untranslated,
    # so the original's side of the difference can be content words alone ("compare lists between
    # binary packages"), too few short words to judge. Then its whole text speaks for it.
    if pa.occurrences < _MIN_OCCURRENCES <= pb.occurrences:
        return not same_language(language_profile(a), pb)
    if pb.occurrences < _MIN_OCCURRENCES <= pa.occurrences:
        return not same_language(pa, language_profile(b))
    return False
