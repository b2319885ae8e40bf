"""The ``DEDUP_*`` settings: defaults, reading and validation.

Settings are read once, when the crawl starts; a bad value fails there with a
message that names the setting, never halfway through a crawl.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import NotConfigured
from scrapy.settings import BaseSettings

from scrapy_dedup.core.boilerplate import DEFAULT_BOILERPLATE_MIN_PAGES, DEFAULT_BOILERPLATE_SHARE
from scrapy_dedup.core.canonical import SCOPES
from scrapy_dedup.core.chunks import DEFAULT_CHUNK_WORDS
from scrapy_dedup.core.fingerprints import DEFAULT_MAX_DISTANCE, DEFAULT_MIN_JACCARD, DEFAULT_MIN_TOKENS
from scrapy_dedup.core.hostrules import HostRules
from scrapy_dedup.core.urls import DEFAULT_SESSION_PARAMS, DEFAULT_TRACKING_PARAMS, UrlRules
from scrapy_dedup.decide.chunk_layer import ChunkRules
from scrapy_dedup.store import REDIS_BACKEND, is_redis_url

if TYPE_CHECKING:
    from scrapy_dedup.extraction.analysis import ExtractOptions

EXTRACT_MODES = ("balanced", "precision", "recall")


def _default_workers() -> int:
    return os.cpu_count() or 1


#: Every setting with its default (docs/settings.rst has one entry per setting; tests/test_docs.py checks them).
DEFAULTS: dict[str, Any] = {
    "DEDUP_ENABLED": True,
    "DEDUP_STORE": None,  # directory; None: <project>/.scrapy/dedup/<spider name>
    "DEDUP_STORE_BACKEND": "scrapy_dedup.store.leveldb.LevelDBStore",
    "DEDUP_STORE_CACHE_MB": 16,
    "DEDUP_REDIS_PREFIX": None,  # None: dedup:<spider name>
    "DEDUP_REDIS_RETRIES": 5,
    "DEDUP_REDIS_LEASE": 30,
    "DEDUP_HOST_RULES": {},
    "DEDUP_TRACKING_PARAMS": list(DEFAULT_TRACKING_PARAMS),
    "DEDUP_SESSION_PARAMS": list(DEFAULT_SESSION_PARAMS),
    "DEDUP_REVISIT_AFTER": None,  # seconds; None: documents are never fetched again
    "DEDUP_CANONICAL_SCOPE": "host",
    "DEDUP_CANONICAL_TIMEOUT": 30.0,
    "DEDUP_CANONICAL_MAX_DEPTH": 5,
    "DEDUP_URL_FIELD": "url",
    "DEDUP_TEXT_FIELD": "text",
    "DEDUP_HTML_FIELD": "html",
    "DEDUP_TITLE_FIELD": "title",
    # False: the item is the spider's; a later pipeline or the feed may want its HTML
    "DEDUP_DROP_HTML": False,
    "DEDUP_SCOPE_FIELD": None,
    "DEDUP_DROP_DUPLICATES": True,
    "DEDUP_WORKERS": None,  # None: the CPU count; 0: extract in a thread of the crawl process
    "DEDUP_MAX_DISTANCE": DEFAULT_MAX_DISTANCE,
    "DEDUP_MIN_JACCARD": DEFAULT_MIN_JACCARD,
    "DEDUP_MIN_TOKENS": DEFAULT_MIN_TOKENS,
    "DEDUP_AUTHORITY": [],
    "DEDUP_MAX_BODY_BYTES": 2 * 1024 * 1024,
    "DEDUP_MAX_TEXT_CHARS": 1_000_000,
    "DEDUP_EXTRACT_MODE": "balanced",
    "DEDUP_EXTRACT_TABLES": True,
    "DEDUP_EXTRACT_COMMENTS": False,
    "DEDUP_KEEP_TEXT": True,
    "DEDUP_CHUNKS": False,
    "DEDUP_CHUNK_WORDS": DEFAULT_CHUNK_WORDS,
    "DEDUP_BOILERPLATE_MIN_PAGES": DEFAULT_BOILERPLATE_MIN_PAGES,
    "DEDUP_BOILERPLATE_SHARE": DEFAULT_BOILERPLATE_SHARE,
    "DEDUP_BOILERPLATE_BY_PATH": False,
    "DEDUP_DEBUG": False,
    "DEDUP_LOGSTATS_INTERVAL": 60.0,
}


class SettingError(ValueError):
    """A ``DEDUP_*`` setting has a bad value; the message names the setting."""


def unknown_settings(settings: BaseSettings) -> list[str]:
    """A warning for each ``DEDUP_*`` setting that scrapy-dedup does not read: a typo must not
    pass silently.

    >>> unknown_settings(BaseSettings({"DEDUP_MAX_DISTANSE": 5, "DEDUP_STORE": "s"}))
    ['DEDUP_MAX_DISTANSE is not a scrapy-dedup setting; did you mean DEDUP_MAX_DISTANCE?']
    """
    warnings = []
    for name in sorted(settings):
        if name.startswith("DEDUP_") and name not in DEFAULTS:
            close = difflib.get_close_matches(name, DEFAULTS, n=1)
            hint = f"; did you mean {close[0]}?" if close else " (the manual's settings reference lists them all)"
            warnings.append(f"{name} is not a scrapy-dedup setting{hint}")
    return warnings


def _list(settings: dict[str, Any], name: str) -> list[str]:
    value = settings[name]
    if isinstance(value, str):
        value = json.loads(value) if value.strip().startswith("[") else [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a list of strings, got {value!r}")
    return list(value)


def _choice(settings: dict[str, Any], name: str, choices: tuple[str, ...]) -> str:
    value = settings[name]
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value


def _bool(settings: dict[str, Any], name: str) -> bool:
    value = settings[name]
    if isinstance(value, str):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _optional_number(settings: dict[str, Any], name: str, *, minimum: float = 0) -> float | None:
    """``_number``, where None means "off"."""
    return None if settings[name] is None else _number(settings, name, minimum=minimum)


def _number(settings: dict[str, Any], name: str, *, minimum: float = 0) -> float:
    value = settings[name]
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")
    return number


@dataclass(frozen=True)
class DedupConfig:
    store: str | None
    store_backend: str
    store_cache_mb: int
    #: DEDUP_HOST_RULES, DEDUP_TRACKING_PARAMS and DEDUP_SESSION_PARAMS, as one value
    url_rules: UrlRules
    revisit_after: float | None
    canonical_scope: str
    canonical_timeout: float
    canonical_max_depth: int
    url_field: str
    text_field: str
    html_field: str
    title_field: str
    #: DEDUP_DROP_HTML: an item that leaves with its text loses its html field
    drop_html: bool
    scope_field: str | None
    drop_duplicates: bool
    workers: int
    max_distance: int
    min_jaccard: float
    min_tokens: int
    authority: tuple[str, ...]
    max_body_bytes: int
    max_text_chars: int
    extract_mode: str
    extract_tables: bool
    extract_comments: bool
    keep_text: bool
    debug: bool
    logstats_interval: float
    #: the Redis store's key prefix; None: ``dedup:<spider name>``
    redis_prefix: str | None = None
    redis_retries: int = 5
    #: seconds an owed request stays held by a process on a shared store without renewal
    redis_lease: float = 30.0
    #: DEDUP_CHUNKS: items carry their chunks, made and settled by these rules
    #: (DEDUP_CHUNK_WORDS, DEDUP_BOILERPLATE_*, and the page rule's thresholds)
    chunks: bool = False
    chunk_rules: ChunkRules = ChunkRules()

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> DedupConfig:
        """The config of ``settings``; SettingError, naming the setting, for a bad value."""
        if not settings.getbool("DEDUP_ENABLED", True):
            raise NotConfigured("DEDUP_ENABLED is False")
        try:
            return cls._read(settings)
        except SettingError:
            raise
        except ValueError as exc:
            raise SettingError(str(exc)) from None

    @classmethod
    def _read(cls, settings: BaseSettings) -> DedupConfig:
        debug = settings.getbool("DEDUP_DEBUG") or settings.getbool("DUPEFILTER_DEBUG")
        # a redis:// store picks its backend; a backend named explicitly still wins
        backend = settings.get("DEDUP_STORE_BACKEND") or (
            REDIS_BACKEND if is_redis_url(settings.get("DEDUP_STORE")) else DEFAULTS["DEDUP_STORE_BACKEND"]
        )
        # explicit None keeps its meaning only where None is the default
        values = {
            name: default if settings.get(name) is None else settings.get(name) for name, default in DEFAULTS.items()
        }
        max_distance = int(_number(values, "DEDUP_MAX_DISTANCE"))
        if max_distance > 3:
            raise ValueError(
                f"DEDUP_MAX_DISTANCE must be 0..3 (the 16-bit-block tables find every fingerprint "
                f"within distance 3); got {max_distance}. Larger edits are caught by DEDUP_MIN_JACCARD."
            )
        min_jaccard = _number(values, "DEDUP_MIN_JACCARD")
        if min_jaccard > 1:
            raise ValueError(f"DEDUP_MIN_JACCARD must be between 0 and 1, got {min_jaccard}")
        workers = values["DEDUP_WORKERS"]
        chunks = _bool(values, "DEDUP_CHUNKS")
        keep_text = _bool(values, "DEDUP_KEEP_TEXT")
        if chunks and not keep_text:
            raise ValueError(
                "DEDUP_CHUNKS needs DEDUP_KEEP_TEXT = True: the chunk statuses are settled at the end "
                "of the crawl from the documents' kept texts"
            )
        min_pages = int(_number(values, "DEDUP_BOILERPLATE_MIN_PAGES", minimum=2))
        share = _number(values, "DEDUP_BOILERPLATE_SHARE")
        if not 0 < share <= 1:
            raise ValueError(f"DEDUP_BOILERPLATE_SHARE must be in (0, 1], got {share}")
        return cls(
            store=values["DEDUP_STORE"] or None,
            store_backend=backend,
            store_cache_mb=int(_number(values, "DEDUP_STORE_CACHE_MB", minimum=1)),
            url_rules=UrlRules(
                values["DEDUP_HOST_RULES"] or {},
                _list(values, "DEDUP_TRACKING_PARAMS"),
                _list(values, "DEDUP_SESSION_PARAMS"),
                setting="DEDUP_HOST_RULES",
            ),
            revisit_after=_optional_number(values, "DEDUP_REVISIT_AFTER"),
            canonical_scope=_choice(values, "DEDUP_CANONICAL_SCOPE", SCOPES),
            canonical_timeout=_number(values, "DEDUP_CANONICAL_TIMEOUT"),
            canonical_max_depth=int(_number(values, "DEDUP_CANONICAL_MAX_DEPTH")),
            url_field=values["DEDUP_URL_FIELD"],
            text_field=values["DEDUP_TEXT_FIELD"],
            html_field=values["DEDUP_HTML_FIELD"],
            title_field=values["DEDUP_TITLE_FIELD"],
            drop_html=_bool(values, "DEDUP_DROP_HTML"),
            scope_field=values["DEDUP_SCOPE_FIELD"] or None,
            drop_duplicates=_bool(values, "DEDUP_DROP_DUPLICATES"),
            workers=_default_workers() if workers is None else int(_number(values, "DEDUP_WORKERS")),
            max_distance=max_distance,
            min_jaccard=min_jaccard,
            min_tokens=int(_number(values, "DEDUP_MIN_TOKENS")),
            authority=tuple(_list(values, "DEDUP_AUTHORITY")),
            max_body_bytes=int(_number(values, "DEDUP_MAX_BODY_BYTES", minimum=1)),
            max_text_chars=int(_number(values, "DEDUP_MAX_TEXT_CHARS", minimum=1)),
            extract_mode=_choice(values, "DEDUP_EXTRACT_MODE", EXTRACT_MODES),
            extract_tables=_bool(values, "DEDUP_EXTRACT_TABLES"),
            extract_comments=_bool(values, "DEDUP_EXTRACT_COMMENTS"),
            keep_text=keep_text,
            debug=debug,
            logstats_interval=_number(values, "DEDUP_LOGSTATS_INTERVAL"),
            redis_prefix=values["DEDUP_REDIS_PREFIX"] or None,
            redis_retries=int(_number(values, "DEDUP_REDIS_RETRIES")),
            redis_lease=_number(values, "DEDUP_REDIS_LEASE", minimum=1),
            chunks=chunks,
            chunk_rules=ChunkRules(
                int(_number(values, "DEDUP_CHUNK_WORDS", minimum=1)),
                min_pages,
                share,
                _bool(values, "DEDUP_BOILERPLATE_BY_PATH"),
                int(_number(values, "DEDUP_MIN_TOKENS")),
                min_jaccard,
                max_distance,
            ),
        )

    @property
    def extract_options(self) -> ExtractOptions:
        """How the pipeline and ``ingest`` extract and fingerprint a page's text."""
        # here, not at the top: the report commands read settings without importing trafilatura
        from scrapy_dedup.extraction.analysis import ExtractOptions

        return ExtractOptions(
            favor_precision=self.extract_mode == "precision",
            favor_recall=self.extract_mode == "recall",
            include_tables=self.extract_tables,
            include_comments=self.extract_comments,
            max_text_chars=self.max_text_chars,
        )

    @property
    def host_rules(self) -> HostRules:
        return self.url_rules.host_rules

    @property
    def tracking_params(self) -> tuple[str, ...]:
        return self.url_rules.tracking_params

    @property
    def session_params(self) -> tuple[str, ...]:
        return self.url_rules.session_params
