"""Settings of the web pair's server (bench/web.py): tests/settings.py, with this bench's
URLconf and the database connections a production deployment keeps.

``DATABASE_URL`` is the bench's own database (``config.database_url()``), set by the
bench in gunicorn's environment; never a test database.

``CONN_MAX_AGE = 600`` with ``CONN_HEALTH_CHECKS``: a sync worker serves one request at a
time, so it keeps one connection open across requests, as a deployment without a
connection pooler does. Opening a PostgreSQL connection per request (the default, 0) forks
a server backend and authenticates every time, which costs a few milliseconds, more than
either view's own work, and would blur the comparison into the price of connecting. Ten
minutes (the value Django's documentation suggests) bounds a connection's life; the health
check replaces one the server dropped at the next request instead of failing it.
"""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

ROOT_URLCONF = "bench.webapp"
ALLOWED_HOSTS = ["127.0.0.1"]  # the load generator's only address: loopback
DATABASES["default"]["CONN_MAX_AGE"] = 600
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
