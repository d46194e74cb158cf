"""The ambient correlation id: one id follows a piece of work across requests, sagas and timers.

The id lives in a :class:`contextvars.ContextVar`, so it is naturally per thread and per
asyncio task: a new thread starts without one, an asyncio task (and ``sync_to_async`` /
``async_to_sync``) inherits a copy of its creator's. ``publish()`` stamps it on every
``Envelope``, a timer stores it with its row and restores it when it fires, and the Celery
tasks carry it across the broker.

:class:`CorrelationMiddleware` establishes it for each HTTP request from the
``X-Correlation-ID`` header and echoes it in the response.

Beside it, :func:`saga_scope` names the saga a piece of work is about (a step, a timer or
an outbox row being delivered), for log records (:mod:`bsft_saga.logging`).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest
from django.http.response import HttpResponseBase

__all__ = [
    "HEADER",
    "MAX_LENGTH",
    "CorrelationIdFilter",
    "CorrelationMiddleware",
    "SagaInScope",
    "correlation_scope",
    "current_saga",
    "get_correlation_id",
    "is_valid_correlation_id",
    "new_correlation_id",
    "saga_scope",
]

#: The HTTP header read from requests and written to responses.
HEADER = "X-Correlation-ID"
#: The longest accepted incoming id; anything longer is replaced by a fresh one.
MAX_LENGTH = 200

_META_KEY = "HTTP_" + HEADER.upper().replace("-", "_")
# ASCII only: ``str.isalnum`` would let in any Unicode letter or digit, which log pipelines
# and header parsers downstream do not all treat the same way.
# ``fullmatch`` rather than ``match``: ``$`` alone would accept a trailing newline.
_VALID_ID = re.compile(rf"^[A-Za-z0-9\-_.:]{{1,{MAX_LENGTH}}}$")

_correlation_id: ContextVar[str | None] = ContextVar("bsft_saga_correlation_id", default=None)


def get_correlation_id() -> str | None:
    """Return the correlation id of the current context, or ``None`` outside any scope."""
    return _correlation_id.get()


@contextmanager
def correlation_scope(correlation_id: str | None) -> Iterator[str | None]:
    """Make ``correlation_id`` the ambient id for the ``with`` block and yield it.

    The previous value (possibly ``None``) is restored on exit, also when the block raises,
    so scopes nest. ``None`` clears the id for the block. The value is not validated:
    ids from trusted sources (stored timers, envelopes) are taken as they are; only the
    middleware filters untrusted input.
    """
    token = _correlation_id.set(correlation_id)
    try:
        yield correlation_id
    finally:
        _correlation_id.reset(token)


@dataclass(frozen=True)
class SagaInScope:
    """The saga the current work is about: its type, its correlation key (``""`` for a
    single-instance flow) and its id."""

    saga_type: str
    saga_key: str
    saga_id: uuid.UUID


_saga: ContextVar[SagaInScope | None] = ContextVar("bsft_saga_saga_in_scope", default=None)


def current_saga() -> SagaInScope | None:
    """Return the saga of the current context (a step, a delivered row), or ``None``."""
    return _saga.get()


@contextmanager
def saga_scope(saga: SagaInScope | None) -> Iterator[SagaInScope | None]:
    """Make ``saga`` the saga of the ``with`` block (``None``: none); scopes nest, as
    :func:`correlation_scope` does."""
    token = _saga.set(saga)
    try:
        yield saga
    finally:
        _saga.reset(token)


def new_correlation_id() -> str:
    """Return a fresh random id: a UUID4 as 32 lowercase hex characters."""
    return uuid.uuid4().hex


def is_valid_correlation_id(value: str) -> bool:
    """Tell whether ``value`` may be accepted from outside as a correlation id.

    Valid: 1 to 200 characters, each an ASCII letter, an ASCII digit or one of ``-_.:``.
    """
    return isinstance(value, str) and _VALID_ID.fullmatch(value) is not None


class CorrelationMiddleware:
    """Run each request inside a correlation scope taken from the ``X-Correlation-ID`` header.

    A valid incoming id is kept; a missing or invalid one (empty, longer than 200 characters,
    or with a character other than ASCII letters, digits and ``-_.:``) is replaced by a
    fresh :func:`new_correlation_id`. The id is stored on ``request.correlation_id``, is the
    ambient id while the rest of the stack and the view run, and is set on the response's
    ``X-Correlation-ID`` header. Works under both WSGI and ASGI.

    Place it early in ``MIDDLEWARE`` so that the middleware below it, and their logging,
    see the id.
    """

    sync_capable = True
    async_capable = True

    def __init__(
        self,
        get_response: Callable[[HttpRequest], HttpResponseBase]
        | Callable[[HttpRequest], Awaitable[HttpResponseBase]],
    ) -> None:
        self.get_response = get_response
        self._is_async = iscoroutinefunction(get_response)
        if self._is_async:
            # Tells Django's handler that this instance must be awaited.
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        """Handle ``request`` synchronously, or return a coroutine under ASGI."""
        if self._is_async:
            return self.__acall__(request)
        correlation_id = self.resolve(request)
        with correlation_scope(correlation_id):
            response = cast(HttpResponseBase, self.get_response(request))
        response[HEADER] = correlation_id
        return response

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        """Handle ``request`` under ASGI."""
        correlation_id = self.resolve(request)
        with correlation_scope(correlation_id):
            response = await cast(Awaitable[HttpResponseBase], self.get_response(request))
        response[HEADER] = correlation_id
        return response

    @staticmethod
    def resolve(request: HttpRequest) -> str:
        """Return the request's correlation id and store it on ``request.correlation_id``."""
        incoming = request.META.get(_META_KEY)
        if isinstance(incoming, str) and is_valid_correlation_id(incoming):
            correlation_id = incoming
        else:
            correlation_id = new_correlation_id()
        request.correlation_id = correlation_id  # type: ignore[attr-defined]
        return correlation_id


class CorrelationIdFilter(logging.Filter):
    """Add ``record.correlation_id`` (the ambient id, or ``"-"``) to every log record.

    Use it in ``LOGGING["filters"]`` and reference ``%(correlation_id)s`` in a formatter.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Annotate ``record``; never drops it."""
        record.correlation_id = get_correlation_id() or "-"
        return True
