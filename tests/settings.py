"""Minimal settings for bsft_saga's own test suite.

``DATABASE_URL`` selects the backend (SQLite file by default, PostgreSQL and MariaDB in the
later runs of ``make test``). Subprocess tests inherit these settings through the environment.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()

SECRET_KEY = "bsft-saga-tests"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",  # the browser tests' live server serves the admin's CSS
    "rest_framework",
    "bsft_saga",
    "tests.testapp",
    "tests.eventsapp",
]

STATIC_URL = "static/"

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "bsft_saga.correlation.CorrelationMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# Test databases are named per test run (pid), so that concurrent runs never share one.
# Child processes get the test database's own name through DATABASE_URL instead.
_run = os.getpid()
_default_sqlite = BASE_DIR / ".test-db.sqlite3"
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{_default_sqlite}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not :memory:, so subprocess tests and the Celery worker share the test database.
    DATABASES["default"]["TEST"] = {
        "NAME": os.environ.get(
            "BSFT_SAGA_SQLITE_TEST_NAME",
            os.path.join(tempfile.gettempdir(), f"bsft_saga_test_{_run}.sqlite3"),
        )
    }
    DATABASES["default"]["OPTIONS"] = {"timeout": 30, "transaction_mode": "IMMEDIATE"}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["TEST"] = {
        "NAME": os.environ.get("BSFT_SAGA_PG_TEST_NAME", f"test_bsft_saga_{_run}")
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # MariaDB or MySQL: utf8mb4 (every code point, not MySQL's three-byte "utf8") compared
    # byte for byte, as PostgreSQL compares; READ COMMITTED, which bsft_saga needs
    # (bsft_saga.W004), also written out because it is what a project must set.
    DATABASES["default"]["TEST"] = {
        "NAME": os.environ.get("BSFT_SAGA_MYSQL_TEST_NAME", f"test_bsft_saga_{_run}"),
        "CHARSET": "utf8mb4",
        "COLLATION": "utf8mb4_bin",
    }
    DATABASES["default"]["OPTIONS"] = {"charset": "utf8mb4", "isolation_level": "read committed"}

BSFT_SAGA = {
    # Subprocess tests tune the dispatcher (e.g. a short CLAIM_LEASE) through the environment.
    "DELIVERY": {"POLL_INTERVAL": 1, **json.loads(os.environ.get("BSFT_SAGA_DELIVERY_JSON", "{}"))},
    "CALENDARS": {
        "berlin": {
            "BACKEND": "bsft_saga.calendars.WeekdayBusinessCalendar",
            "OPTIONS": {"country": "DE", "subdiv": "BE", "timezone": "Europe/Berlin"},
        },
    },
    "API": {"READ_CONTENT_PERMISSION": "bsft_saga.read_saga_content"},
}

# Unit tests run Celery tasks in-process; the real worker tests start a worker with
# CELERY_TASK_ALWAYS_EAGER=0 in its environment.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="redis://127.0.0.1:6379/15")
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=True)
CELERY_TASK_EAGER_PROPAGATES = True
# Suites run side by side (make test's lanes) each name a queue of their own: on RabbitMQ
# they share one virtual host, where the default queue would hand one lane's tasks to the
# other's worker. On Redis each lane has a database of its own (CELERY_BROKER_URL).
CELERY_TASK_DEFAULT_QUEUE = env("BSFT_SAGA_CELERY_QUEUE", default="celery")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"bsft_saga": {"handlers": ["console"], "level": "WARNING"}},
}
