"""What a failed attempt stores on its row: a readable reason that every backend accepts."""

from __future__ import annotations

import re

MAX_REASON_LENGTH = 4000

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
    return _UNSTORABLE.sub("\ufffd", reason[:MAX_REASON_LENGTH])
