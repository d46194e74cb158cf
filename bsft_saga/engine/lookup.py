"""Finding the instance an event is for, and whether it already handled the message.

One query per flow and key, the first of every event: it reads the active instance with an
``EXISTS`` on its inbox (did it handle the message?) and one on its pending step-scoped
timers other than the one firing (does ending the wait cancel anything?), and, for a start
event, also a finished instance of the key that handled the message (a redelivered start
event starts nothing).
It is written once as SQL (see :mod:`bsft_saga.db.sql` for why); its columns come back as the
ORM converts them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.db import connection

from bsft_saga.db import sql
from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaTimeout, TimeoutScope

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


@dataclass(frozen=True)
class Found:
    """What a plan needs of an instance, and whether it handled the message."""

    pk: uuid.UUID
    correlation_key: str
    step_index: int
    version: int
    state: dict[str, Any]
    deadline: datetime | None
    flow_version: int
    is_complete: bool
    handled: bool
    #: Whether a step-scoped timer is pending. Only a step of the saga schedules one (a
    #: requeue bumps the version), so the version check keeps this true at commit.
    step_timers_pending: bool


_CONVERTED = (*((SagaInstance, name) for name in _COLUMNS), None, None)  # the two EXISTS


def instance_for(
    saga_type: str,
    correlation_key: str,
    message_id: uuid.UUID,
    *,
    or_finished: bool,
    firing: int | None = None,
) -> Found | None:
    """The active instance of the key, else (``or_finished``) a finished one that handled
    ``message_id``; ``None`` if neither.

    ``firing``: the id of the timer whose event this is. It is still pending until the
    pass stamps it, but it is not a timer that ending the wait has to cancel.
    """
    message = SagaInboxEntry._meta.get_field("message_id").get_db_prep_value(
        message_id, connection, prepared=False
    )
    # 0 is no timer's id (they count from 1).
    params = [message, TimeoutScope.STEP.value, firing or 0, saga_type, correlation_key]
    if or_finished:
        params.append(message)
    row = sql.select_one(_sql(or_finished, connection.vendor), params, _CONVERTED)
    if row is None:
        return None
    pk, key, step_index, version, state, deadline, flow_version, is_complete, *exists = row
    return Found(
        pk=pk,
        correlation_key=key,
        step_index=step_index,
        version=version,
        state=state,
        deadline=deadline,
        flow_version=flow_version,
        is_complete=bool(is_complete),
        handled=bool(exists[0]),
        step_timers_pending=bool(exists[1]),
    )


@cache
def _sql(or_finished: bool, vendor: str) -> str:
    quote = connection.ops.quote_name
    instances = quote(SagaInstance._meta.db_table)
    inbox = quote(SagaInboxEntry._meta.db_table)
    timers = quote(SagaTimeout._meta.db_table)
    columns = ", ".join(f"i.{quote(name)}" for name in _COLUMNS)
    saga, message, pk = quote("saga_id"), quote("message_id"), quote("id")
    handled = f"EXISTS (SELECT 1 FROM {inbox} e WHERE e.{saga} = i.{pk} AND e.{message} = %s)"
    step_timers = (
        f"EXISTS (SELECT 1 FROM {timers} t WHERE t.{saga} = i.{pk} AND t.{quote('scope')} = %s "
        f"AND t.{quote('dispatched_at')} IS NULL AND t.{pk} <> %s)"
    )
    which = f"NOT i.{quote('is_complete')}"
    if or_finished:
        which = f"({which} OR i.{pk} IN (SELECT f.{saga} FROM {inbox} f WHERE f.{message} = %s))"
    return (
        f"SELECT {columns}, {handled}, {step_timers} FROM {instances} i "
        f"WHERE i.{quote('saga_type')} = %s AND i.{quote('correlation_key')} = %s AND {which} "
        f"ORDER BY i.{quote('is_complete')} LIMIT 1"
    )
