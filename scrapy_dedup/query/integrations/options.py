"""The settings the pydantic-based adapters (LangChain, LlamaIndex) share, and their call.

Both frameworks build their components on pydantic models, so the settings are fields of one
model that each adapter inherits; the field names and defaults are :func:`diversify`'s keyword
arguments. Only the adapters import this module, and both frameworks bring pydantic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from scrapy_dedup.query.diversifier import diversify


class DiversifyOptions(BaseModel):
    """:func:`diversify`'s keyword arguments as fields, with its defaults."""

    k: int | None = None
    text: str | Callable[[Any], str] | None = None
    score: str | Callable[[Any], float] | None = None
    embedding: str | Callable[[Any], Sequence[float]] | None = None
    source: str | Callable[[Any], Any] | None = None
    max_per_source: int | None = None
    lambda_mult: float = 0.5
    semantic_threshold: float = 0.95
    drop_semantic: bool = False
    explain: bool = False
    near: bool = True
    merge_overlaps: bool = True

    def _diversify(self, hits: Sequence[Any]) -> list[Any]:
        """:func:`diversify` with these settings; each explanation logged at INFO."""
        options = {name: getattr(self, name) for name in DiversifyOptions.model_fields if name != "k"}
        kept = diversify(hits, self.k, **options)
        logger = logging.getLogger(type(self).__module__)  # the adapter's own module
        for line in kept.explanation:
            logger.info("diversify: %s", line)
        return list(kept)
