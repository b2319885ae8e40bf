"""Pure, framework-free building blocks (no Scrapy, no database imports)."""

from . import bands, canonical, fingerprints, hostrules, text, urls
from .bands import *  # noqa: F403
from .canonical import *  # noqa: F403
from .fingerprints import *  # noqa: F403
from .hostrules import *  # noqa: F403
from .text import *  # noqa: F403
from .urls import *  # noqa: F403

# what each module exports, listed once there
__all__ = [*hostrules.__all__, *urls.__all__, *canonical.__all__, *text.__all__, *fingerprints.__all__, *bands.__all__]
