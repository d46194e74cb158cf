"""Finding the instance an event is for, and whether it already handled the message.

One query per flow and key, the first of every event: it reads the active instance with an
``EXISTS`` on its inbox and, for a start event, also a finished instance of the key that
handled the message (a redelivered start event starts nothing). It is written once as SQL
(see :mod:`bsft_saga.sql` for why) and read through ``Manager.raw()``, so the columns come
back as the ORM converts them.
"""

from __future__ import annotations

import uuid
from functools import cache

from django.db import connection

from bsft_saga.models import SagaInboxEntry, SagaInstance

#: The instance columns a plan needs (``handled`` is added by the query).
_COLUMNS = (
    "id",
    "correlation_key",
    "step_index",
    "version",
    "state",
    "deadline",
    "flow_version",
    "is_complete",
)


def instance_for(
    saga_type: str, correlation_key: str, message_id: uuid.UUID, *, or_finished: bool
) -> SagaInstance | None:
    """The active instance of the key, else (``or_finished``) a finished one that handled
    ``message_id``; ``None`` if neither. The result's ``handled`` attribute says whether
    the instance handled ``message_id``; only the columns a plan needs are loaded."""
    message = SagaInboxEntry._meta.get_field("message_id").get_db_prep_value(
        message_id, connection, prepared=False
    )
    sql = _sql(or_finished, connection.vendor)
    params = [message, saga_type, correlation_key] + ([message] if or_finished else [])
    return next(iter(SagaInstance.objects.raw(sql, params)), None)


@cache
def _sql(or_finished: bool, vendor: str) -> str:
    quote = connection.ops.quote_name
    instances = quote(SagaInstance._meta.db_table)
    inbox = quote(SagaInboxEntry._meta.db_table)
    columns = ", ".join(f"i.{quote(name)}" for name in _COLUMNS)
    saga, message, pk = quote("saga_id"), quote("message_id"), quote("id")
    handled = f"EXISTS (SELECT 1 FROM {inbox} e WHERE e.{saga} = i.{pk} AND e.{message} = %s)"
    which = f"NOT i.{quote('is_complete')}"
    if or_finished:
        which = f"({which} OR i.{pk} IN (SELECT f.{saga} FROM {inbox} f WHERE f.{message} = %s))"
    return (
        f"SELECT {columns}, {handled} AS {quote('handled')} FROM {instances} i "
        f"WHERE i.{quote('saga_type')} = %s AND i.{quote('correlation_key')} = %s AND {which} "
        f"ORDER BY i.{quote('is_complete')} LIMIT 1"
    )
