"""``scrapy dedup``: inspect what the dedup store knows."""
