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
from .text import canonical_text, tokenize
from .fingerprints import (
    DEFAULT_MAX_DISTANCE,
    DEFAULT_MIN_JACCARD,
    DEFAULT_MIN_TOKENS,
    FINGERPRINT_PARAMS,
    Fingerprint,
    content_hash,
    fingerprint,
    hamming,
    jaccard_estimate,
    minhash,
    near_match,
    raw_hash,
    simhash,
)
from .bands import BANDS, BLOCK_BITS, BLOCKS, ROWS, band_hashes, candidate_probability, simhash_blocks
