"""Load testing: the locustfile (tritonclient users, load shapes), the headless runner, metrics scraping."""
