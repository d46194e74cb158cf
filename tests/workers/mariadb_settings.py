"""The test settings with a MariaDB database of the test's own as the default database
(``BSFT_SAGA_MARIADB_NAME``): for ``check`` and ``migrate`` run in a fresh process on an
empty database (tests/processes/test_mariadb_setup.py).
"""

import json
import os

from tests.settings import *  # noqa: F403
from tests.support.services import MARIADB_HOST, MARIADB_PORT, MARIADB_USER

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.mysql",
        "HOST": MARIADB_HOST,
        "PORT": MARIADB_PORT,
        "USER": MARIADB_USER,
        "NAME": os.environ["BSFT_SAGA_MARIADB_NAME"],
        "OPTIONS": json.loads(os.environ.get("BSFT_SAGA_MARIADB_OPTIONS_JSON", "{}")),
    }
}
