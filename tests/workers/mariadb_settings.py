"""The test settings with MariaDB (through PyMySQL) as the default database: for the check
that refuses a backend without partial unique constraints (tests/test_unsupported_databases.py).
"""

import os

import pymysql

pymysql.install_as_MySQLdb()

from tests.settings import *  # noqa: E402,F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.mysql",
        "HOST": os.environ.get("BSFT_SAGA_MARIADB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("BSFT_SAGA_MARIADB_PORT", "3306"),
        "USER": os.environ.get("BSFT_SAGA_MARIADB_USER", "root"),
        "NAME": os.environ["BSFT_SAGA_MARIADB_NAME"],
    }
}
