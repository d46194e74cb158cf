"""Retention and erasure: every saga table stays bounded, and one key can be forgotten.

``purge_saga_data()`` deletes what the ``RETENTION`` windows no longer keep (the
``purge_saga_data`` command and Celery task), ``purge_timeouts()`` only its timers part
(``purge_saga_timeouts``), ``erase_saga_data()`` every instance of one correlation key
(``erase_saga_data``). All of them delete in bounded batches without loading rows.
"""

from __future__ import annotations

from bsft_saga.retention.batches import DEFAULT_BATCH_SIZE, DeletedRows
from bsft_saga.retention.erasure import ERASED, EraseReport, erase_saga_data
from bsft_saga.retention.policy import (
    FROM_SETTINGS,
    RetentionPolicy,
    WindowError,
    minimum_safe_window,
)
from bsft_saga.retention.purge import PurgeReport, apply_policy, purge_saga_data, purge_timeouts

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "ERASED",
    "FROM_SETTINGS",
    "DeletedRows",
    "EraseReport",
    "PurgeReport",
    "RetentionPolicy",
    "WindowError",
    "apply_policy",
    "erase_saga_data",
    "minimum_safe_window",
    "purge_saga_data",
    "purge_timeouts",
]
