"""Child process: publish an event whose step stages another, and die right after commit.

Usage: ``python -m tests.workers.engine_publish_then_die ORDER_ID`` with the parent test's
environment (``subprocess_env``). ``OrderFlow``'s start step ``ctx.publish``es
``ReserveStock``. The process SIGKILLs itself when the after-commit delivery issues the
UPDATE that claims the outbox row: the step has committed, the staged event has not been
delivered, and nothing in this process gets a chance to clean up.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import django


def _die_when_claiming_outbox_row(
    execute: Any, sql: str, params: Any, many: bool, context: Any
) -> Any:
    if (
        sql.lstrip().upper().startswith("UPDATE")
        and "bsft_saga_sagaoutboxmessage" in sql
        and "claim_token" in sql
    ):
        os.kill(os.getpid(), signal.SIGKILL)
    return execute(sql, params, many, context)


def main(order_id: str) -> int:
    django.setup()
    from django.db import connection

    from bsft_saga import publish
    from tests.testapp.events import OrderPlaced

    with connection.execute_wrapper(_die_when_claiming_outbox_row):
        publish(OrderPlaced(order_id))
    print("published and delivered: the kill never happened", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
