"""StatsDump: write the final crawl stats to ``DEMO_STATS_FILE`` as JSON (disabled when unset).

    scrapy crawl site -a start_url=... -s DEMO_STATS_FILE=stats.json
"""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path

from scrapy import signals
from scrapy.exceptions import NotConfigured


def _jsonable(value):
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return str(value)


class StatsDump:
    def __init__(self, crawler, path: str):
        self.crawler = crawler
        self.path = Path(path)

    @classmethod
    def from_crawler(cls, crawler):
        path = crawler.settings.get("DEMO_STATS_FILE")
        if not path:
            raise NotConfigured
        extension = cls(crawler, path)
        # engine_stopped comes after spider_closed and after the stats collector closed,
        # so every component (pipelines, other extensions) has written its stats by then.
        crawler.signals.connect(extension.engine_stopped, signal=signals.engine_stopped)
        return extension

    def engine_stopped(self) -> None:
        stats = self.crawler.stats.get_stats()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(stats, default=_jsonable, indent=2, sort_keys=True), encoding="utf-8")
