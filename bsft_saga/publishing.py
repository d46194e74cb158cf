"""``publish()``: put an event on the bus, now or after the current transaction commits;
``apublish()``: the same from async code."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async

from bsft_saga import clock
from bsft_saga.correlation import MAX_LENGTH, get_correlation_id, new_correlation_id
from bsft_saga.db.datetimes import LATEST, storable
from bsft_saga.db.mysql import storable_uuid
from bsft_saga.events import codec, payloads
from bsft_saga.events.envelope import Envelope
from bsft_saga.events.registry import check_publishable, event_type_of
from bsft_saga.events.sending import send_envelope


def publish(
    event: Any,
    *,
    correlation_id: str | None = None,
    deadline: datetime | None = None,
    message_id: uuid.UUID | str | None = None,
    defer: bool = False,
    deliver_at: datetime | None = None,
    delay: timedelta | None = None,
) -> Envelope:
    """Publish ``event`` (an ``@event`` dataclass) and return its envelope.

    Without ``defer`` the ``event_published`` signal is sent now: saga steps run before
    this returns and, inside the caller's ``transaction.atomic``, commit with it; an
    exception from any receiver propagates. With ``defer=True`` the event is written to
    the outbox in the current transaction and delivered after commit, at least once
    (by a Celery task, or by the drain if that enqueue is lost).

    ``deliver_at`` (an aware datetime) or ``delay`` (a ``timedelta`` >= 0 from now), not
    both, make the event a delayed message: written to the outbox like ``defer=True``
    (which they imply), and delivered by the drain, at least once, once ``deliver_at`` has
    come, never before; after that exactly as a deferred event (back-off, dead letters,
    requeue). Nothing is handed to a worker at commit.

    ``correlation_id`` defaults to the ambient one; with neither, the event gets a fresh
    one (``new_correlation_id()``), which the steps it runs, their timers and the events
    they publish carry on. A payload the codec cannot encode is a ``TypeError`` here; an
    event type of bsft_saga's own (``bsft_saga.*``), a ``deadline`` that is naive or
    outside the stored range (0001-01-02 to 9998-12-31 in UTC, see ``bsft_saga.db.datetimes``),
    a correlation id (given or ambient) longer than 200 characters, or an encoded event
    larger than ``BSFT_SAGA["MAX_PAYLOAD_BYTES"]`` is a ``ValueError``, as is a
    ``message_id`` the database cannot store (on MariaDB, a UUID of version 8 or above).
    Nothing is written when it raises.
    """
    event_type = event_type_of(event)
    where = f"publish({event_type})"
    check_publishable(event_type, where)
    payload = payloads.encode_event(event, event_type)  # fail now, not when a worker reads it
    if deadline is not None:
        storable(deadline, field="deadline", where=where)
    now = clock.now()
    when = delivery_time(deliver_at, delay, now=now, where=where)
    if not correlation_id:  # neither given ("" counts as none) ...
        correlation_id = get_correlation_id()
    if correlation_id:
        check_correlation_id(event_type, correlation_id)
    else:  # ... nor ambient: a fresh one, which the steps, timers and events carry on
        correlation_id = new_correlation_id()
    envelope = Envelope(
        message_id=as_uuid(message_id, where) if message_id is not None else uuid.uuid4(),
        event=event,
        event_type=event_type,
        correlation_id=correlation_id,
        causation_id=None,
        deadline=deadline,
        published_at=now,
    )
    if defer or when is not None:
        from bsft_saga.outbox import stage_deferred

        stage_deferred(envelope, payload, deliver_at=when)
    else:
        send_envelope(envelope)
    return envelope


def delivery_time(
    deliver_at: datetime | None, delay: timedelta | None, *, now: datetime, where: str
) -> datetime | None:
    """When a delayed message is due: ``deliver_at``, or ``now + delay``; ``None`` for
    neither (deliver at once).

    Both is a ``ValueError``, and so are a negative ``delay``, one that runs past the dates
    bsft_saga stores, and a ``deliver_at`` that is naive or out of range (see
    ``bsft_saga.db.datetimes``); a ``delay`` that is not a ``timedelta`` is a ``TypeError``.
    ``where`` names the call in the message.
    """
    if deliver_at is not None and delay is not None:
        raise ValueError(f"{where}: pass deliver_at or delay, not both")
    if delay is None:
        return None if deliver_at is None else storable(deliver_at, field="deliver_at", where=where)
    if not isinstance(delay, timedelta):
        raise TypeError(f"{where}: delay must be a timedelta, got {type(delay).__name__}")
    if delay < timedelta(0):
        raise ValueError(f"{where}: delay must be >= 0, got {delay}")
    try:
        return storable(now + delay, field="deliver_at", where=where)
    except (OverflowError, ValueError):
        raise ValueError(
            f"{where}: the delay {delay} runs past the dates bsft_saga stores "
            f"(up to {LATEST:%Y-%m-%d} UTC)"
        ) from None


def check_correlation_id(event_type: str, correlation_id: str) -> None:
    """``TypeError`` or ``ValueError`` if ``correlation_id`` cannot be stored."""
    # Stored with every timer and outbox row (a 200-character column): refused here, before
    # anything is written, rather than by PostgreSQL at commit (SQLite would store it).
    if not isinstance(correlation_id, str):
        raise TypeError(
            f"publish({event_type}): correlation_id must be a str, "
            f"got {type(correlation_id).__name__}"
        )
    if len(correlation_id) > MAX_LENGTH:
        raise ValueError(
            f"publish({event_type}): the correlation id is {len(correlation_id)} characters "
            f"long; at most {MAX_LENGTH} are stored"
        )
    problem = codec.unstorable_text(correlation_id)
    if problem is not None:
        raise ValueError(f"publish({event_type}): the correlation id cannot be stored: {problem}")


async def apublish(event: Any, **kwargs: Any) -> Envelope:
    """``publish(event, **kwargs)`` for async code, such as an ASGI view.

    Same envelope, same rules: it runs ``publish`` in Django's thread-sensitive executor
    (``sync_to_async(publish, thread_sensitive=True)``), so the steps and their database
    writes run off the event loop, in the thread that holds the request's connection, and
    the ambient correlation id goes along. There is no caller's transaction to join:
    ``transaction.atomic`` is sync-only, so each step commits on its own, as ``publish``
    outside a transaction does; use ``defer=True`` to hand the event over after a commit
    of your own sync code.
    """
    envelope: Envelope = await sync_to_async(publish, thread_sensitive=True)(event, **kwargs)
    return envelope


def as_uuid(value: uuid.UUID | str, where: str) -> uuid.UUID:
    """``value`` as a UUID the database can store (``ValueError`` if it cannot)."""
    given = value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    return storable_uuid(given, field="message_id", where=where)
