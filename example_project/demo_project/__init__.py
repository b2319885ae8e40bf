"""Example Scrapy project for scrapy-dedup (see ../run_demo.py)."""
