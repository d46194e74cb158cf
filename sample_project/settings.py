"""Settings of the sample project, read from the environment through django-environ.

Everything has a development default, so ``make demo`` needs no configuration:

- ``DATABASE_URL``: default ``sqlite:///<repo>/sample_project/db.sqlite3``;
  ``postgres://user@host:5432/name`` works too.
- ``CELERY_BROKER_URL``: default ``redis://127.0.0.1:6379/0``.
- ``SECRET_KEY``, ``DEBUG``, ``ALLOWED_HOSTS``: development defaults; set them in production.
"""

from __future__ import annotations

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent
env = environ.Env()

SECRET_KEY = env("SECRET_KEY", default="django-insecure-bsft-saga-sample-project")
DEBUG = env.bool("DEBUG", default=True)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "bsft_saga",
    "sample_project.orders",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Every event published while handling a request carries the request's correlation id.
    "bsft_saga.correlation.CorrelationMiddleware",
]

ROOT_URLCONF = "sample_project.urls"
WSGI_APPLICATION = "sample_project.wsgi.application"
ASGI_APPLICATION = "sample_project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web process, the worker and beat write to one file: wait for the write lock
    # instead of failing at once, and take it when a transaction begins (IMMEDIATE), so
    # two writers never deadlock upgrading a read lock.
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    # bsft_saga.W001 warns that SQLite has no SELECT ... SKIP LOCKED, so several timer
    # dispatchers would contend for the same rows. The demo runs one; production runs
    # PostgreSQL, where the check stays on.
    SILENCED_SYSTEM_CHECKS = ["bsft_saga.W001"]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True  # bsft_saga requires it (system check bsft_saga.E002)

STATIC_URL = "static/"

BSFT_SAGA = {
    "DELIVERY": {"POLL_INTERVAL": 5},
    "CALENDARS": {
        "berlin": {
            "BACKEND": "bsft_saga.calendars.WeekdayBusinessCalendar",
            "OPTIONS": {"country": "DE", "subdiv": "BE", "timezone": "Europe/Berlin"},
        },
    },
    # Maps GET /api/sagas/instances/<id>/ (state and timers) for users with this permission.
    "API": {"READ_CONTENT_PERMISSION": "bsft_saga.read_saga_content"},
}

# Celery: sample_project/celery.py reads every CELERY_* setting and adds the beat entry
# that drains saga timers every POLL_INTERVAL.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="redis://127.0.0.1:6379/0")
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"bsft_saga": {"handlers": ["console"], "level": "INFO"}},
}
