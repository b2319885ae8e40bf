"""Deprecated: moved to ``scrapy_dedup.query.integrations.haystack``."""

from haystack.core.component import component

from scrapy_dedup._moved import moved
from scrapy_dedup.query.integrations import haystack as _new

# A pipeline saved before the move names the component by this path: Haystack imports this
# module, then finds the class in its registry under that name.
component.registry.setdefault(f"{__name__}.DiversifyRanker", _new.DiversifyRanker)

__getattr__ = moved(__name__, _new.__name__)
