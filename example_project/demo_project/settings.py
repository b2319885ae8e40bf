"""Settings of the scrapy-dedup demo project."""

BOT_NAME = "demo_project"
SPIDER_MODULES = ["demo_project.spiders"]
NEWSPIDER_MODULE = "demo_project.spiders"

# The whole integration: the add-on configures the middlewares, the pipeline and the store.
# DEDUP_STORE is left to its default, .scrapy/dedup/<spider name> inside this project.
ADDONS = {"scrapy_dedup.Addon": 500}

ROBOTSTXT_OBEY = False  # the demo site has no robots.txt
USER_AGENT = "scrapy-dedup-demo/0.1"

# Polite but fast for a local server. Raise DOWNLOAD_DELAY / lower concurrency for real sites.
CONCURRENT_REQUESTS = 16
CONCURRENT_REQUESTS_PER_DOMAIN = 4
DOWNLOAD_DELAY = 0
DOWNLOAD_TIMEOUT = 30
AUTOTHROTTLE_ENABLED = False
TELNETCONSOLE_ENABLED = False

TWISTED_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
LOG_LEVEL = "INFO"
FEED_EXPORT_ENCODING = "utf-8"

# Writes the final stats as JSON to the file named by the DEMO_STATS_FILE setting (tests use it).
EXTENSIONS = {"demo_project.extensions.StatsDump": 500}
