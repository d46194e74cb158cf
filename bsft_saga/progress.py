"""How a long service call tells its caller how far it has come: a ``progress`` callback.

The services that work through many rows in batches (``purge_saga_data()``,
``erase_saga_data()``, the requeues of dead letters) take an optional ``progress`` and call
it after each batch; they never print. The management commands pass one that draws a
progress line on a terminal (:mod:`bsft_saga.management.progress`).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Progress"]

#: ``progress(done, total)``: after each batch, how many rows (or instances) the call has
#: handled so far, and how many it expects to handle in all. ``total`` is counted before the
#: work starts, so rows that appear or go meanwhile can make ``done`` end above or below it.
Progress = Callable[[int, int], None]
