"""The server's own view: scraping the target's Prometheus endpoint during a run (``scraper``)."""
