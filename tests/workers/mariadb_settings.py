"""The test settings with MariaDB (through PyMySQL) as the default database: for the check
that refuses a backend without partial unique constraints
(tests/processes/test_unsupported_databases.py).
"""

import os

import pymysql

from tests.support.services import MARIADB_HOST, MARIADB_PORT, MARIADB_USER

pymysql.install_as_MySQLdb()

from tests.settings import *  # noqa: E402,F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.mysql",
        "HOST": MARIADB_HOST,
        "PORT": MARIADB_PORT,
        "USER": MARIADB_USER,
        "NAME": os.environ["BSFT_SAGA_MARIADB_NAME"],
    }
}
