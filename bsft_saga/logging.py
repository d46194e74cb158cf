"""Log records that name their saga: :class:`SagaContextFilter`.

A step, a fired timer and a delivered outbox row run with the correlation id and the saga
they belong to in scope (:func:`bsft_saga.correlation.correlation_scope`,
:func:`bsft_saga.correlation.saga_scope`); the filter copies both onto every record, so
that a log line written two days after the request, in a worker, still says which order
it is about.
"""

from __future__ import annotations

import logging

from bsft_saga.correlation import CorrelationIdFilter, current_saga

__all__ = ["NONE", "SagaContextFilter"]

#: The value of an attribute with nothing in scope (a record outside any saga).
NONE = "-"


class SagaContextFilter(CorrelationIdFilter):
    """Add ``correlation_id``, ``saga_type``, ``saga_key`` and ``saga_id`` to every record.

    Inside a step, a receiver of a fired timer or a delivered outbox row, or a pass
    delivering one: the correlation id the work runs under (the one stored with the timer
    or the row, not the dispatcher's) and its saga's type, correlation key and id (as a
    string). Outside, or for an event of no saga, the missing ones are ``"-"``
    (:data:`NONE`). Attach it to a handler (a logger's filters do not see the records its
    child loggers propagate) and use ``%(saga_type)s`` and the others in a formatter; the
    OpenTelemetry log bridge exports them as attributes of each log record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Annotate ``record``; never drops it."""
        super().filter(record)  # correlation_id
        saga = current_saga()
        if saga is None:
            record.saga_type = record.saga_key = record.saga_id = NONE
        else:
            record.saga_type = saga.saga_type
            record.saga_key = saga.saga_key
            record.saga_id = str(saga.saga_id)
        return True
