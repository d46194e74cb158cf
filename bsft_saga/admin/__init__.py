"""The Django admin of bsft_saga: read-only operational pages and the actions operators use.

- :mod:`~bsft_saga.admin.sagas`: the registered ``ModelAdmin`` classes (instances, timers,
  outbox rows, audit records);
- :mod:`~bsft_saga.admin.kept`: the kept events' changelist and its requeue action;
- :mod:`~bsft_saga.admin.operations`: the actions that change sagas (terminate, fire now)
  and their intermediate pages;
- :mod:`~bsft_saga.admin.queries`: the lookups, filters and searches a changelist accepts
  from its URL, so that none can leak content or run unbounded.
"""

from bsft_saga.admin import kept, sagas  # noqa: F401  (registers the ModelAdmin classes)
