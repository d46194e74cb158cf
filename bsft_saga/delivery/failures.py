"""Failed attempts: what a failure stores on its row, and when the row is tried again."""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from django.db import DatabaseError, connection, transaction

from bsft_saga import clock
from bsft_saga.conf import DeliverySettings
from bsft_saga.delivery.backoff import retry_delay
from bsft_saga.delivery.channel import Channel, R
from bsft_saga.delivery.report import Outcome

logger = logging.getLogger("bsft_saga.delivery")

MAX_REASON_LENGTH = 4000

#: How a failure that cost its pass the database connection starts: such a row is claimed
#: alone on its next attempt, so that it cannot take a batch down with it again.
CONNECTION_LOST = "ConnectionLost"

# PostgreSQL refuses NUL in text; no UTF-8 encoder accepts a lone surrogate. An exception's
# text can hold either (it often quotes a payload), and the failure must be recorded anyway.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def failure_reason(exc: BaseException) -> str:
    """``"ExceptionType: message"``, cut to 4000 characters, with NUL characters and lone
    surrogates replaced by U+FFFD; never raises, whatever ``str(exc)`` does."""
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not stop the bookkeeping
        message = "<the exception's message could not be rendered>"
    reason = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return _storable(reason)


def lost_connection_reason(exc: BaseException) -> str:
    """The failure recorded for the row whose delivery lost its pass's connection."""
    return _storable(
        f"{CONNECTION_LOST}: the database connection was lost while this row was being "
        f"delivered ({failure_reason(exc)})"
    )


def _storable(reason: str) -> str:
    return _UNSTORABLE.sub("\ufffd", reason[:MAX_REASON_LENGTH])


def lost_the_connection(exc: BaseException) -> bool:
    """Whether ``exc`` left the default connection unusable (a failover, a killed session).

    Inside a transaction, one whose savepoint could not be rolled back is broken, and so is
    one the driver found broken (a statement that failed with no savepoint to roll back
    to: a commit group written at once), or, on MariaDB and MySQL, whose driver raised one
    of the client's "connection gone" errors (mysqlclient keeps no broken flag). Outside
    one Django notices a lost connection only on the next query, so this asks the database
    (one ``SELECT 1``), and only after a database error.
    """
    if not isinstance(exc, DatabaseError):
        return False
    if connection.in_atomic_block:
        return (
            connection.needs_rollback
            or connection.closed_in_transaction
            or _broken(connection.connection)
            or _gone_on_mysql(exc)
        )
    return connection.connection is None or not connection.is_usable()


#: The MariaDB and MySQL errors of a connection that is gone: the server has gone away
#: (2006), the connection was lost during a query (2013), killed (1927,
#: ``ER_CONNECTION_KILLED``), or closed by the server for inactivity (4031).
_MYSQL_CONNECTION_GONE = frozenset({2006, 2013, 1927, 4031})


def _gone_on_mysql(exc: DatabaseError) -> bool:
    return connection.vendor == "mysql" and bool(exc.args) and exc.args[0] in _MYSQL_CONNECTION_GONE


def _broken(driver_connection: Any) -> bool:
    """Whether the driver knows its connection is gone: psycopg 3's ``broken``, psycopg
    2's ``closed`` (SQLite's connections have neither, and do not break this way)."""
    if driver_connection is None:
        return True
    broken = getattr(driver_connection, "broken", None)
    if broken is not None:
        return bool(broken)
    return bool(getattr(driver_connection, "closed", False))


def record_failure(
    channel: Channel[R],
    row: R,
    token: uuid.UUID,
    reason: str,
    config: DeliverySettings,
) -> Outcome:
    """Count a failed attempt of ``row``: retry after the back-off, or dead-letter it.

    The record is written only while ``token`` still holds the row, in a transaction (a
    savepoint) of its own: a record that cannot be written is logged and leaves the row to
    its lease (it is tried again once that has passed); it never stops the pass. Returns
    ``FAILED``, ``DEAD_LETTERED`` or, if the row was no longer held, ``UNCLAIMED``.
    """
    attempts = row.attempts + 1
    now = clock.now()
    values: dict[str, Any] = {"attempts": attempts, "last_error": reason, "claimed_until": None}
    retirement = None
    if attempts >= config.max_dispatch_attempts:
        outcome = Outcome.DEAD_LETTERED
        retirement = channel.retire([row], outcome, now, reason=reason)
        values.update(retirement.stamp)
    else:
        outcome = Outcome.FAILED
        delay = retry_delay(attempts, base=config.retry_backoff, cap=config.max_retry_delay)
        values.update(next_attempt_at=now + delay, claim_token=None)
    try:
        with transaction.atomic():
            recorded = channel.held(token).filter(pk=row.pk).update(**values)
            if recorded and retirement is not None:
                retirement.journal()
    except DatabaseError as error:
        if lost_the_connection(error):
            raise
        logger.exception("bsft_saga: could not record the failure of %s", channel.describe(row))
        return Outcome.FAILED
    return outcome if recorded else Outcome.UNCLAIMED
