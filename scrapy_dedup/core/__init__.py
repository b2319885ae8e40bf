"""Pure, framework-free building blocks (no Scrapy, no database imports)."""

from .hostrules import HostRule, HostRules
from .urls import (
    DEFAULT_DIRECTORY_INDEXES,
    DEFAULT_SESSION_PARAMS,
    DEFAULT_TRACKING_PARAMS,
    InvalidURL,
    normalize_url,
    url_key,
)
from .canonical import (
    SCOPES,
    CanonicalLink,
    canonical_from_html,
    canonical_from_link_header,
    canonical_scope_check,
    resolve_canonical,
)
