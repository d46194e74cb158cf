"""Database connection hygiene for code that runs outside Django's request cycle."""

from __future__ import annotations

from django.db import connections


def refresh_idle_connections() -> None:
    """``close_old_connections()``, except for a connection inside a transaction.

    Django closes broken and expired connections (``CONN_MAX_AGE``) when a request starts
    and ends. A dispatcher loop or a metrics exporter thread has no requests, so it calls
    this before and after its work instead. A connection inside an ``atomic`` block (a
    caller's, or a test's) is not ours to close and is left alone.
    """
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()
