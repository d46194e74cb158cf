"""System checks: ``manage.py check`` lists every configuration problem with an id."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections, router

from bsft_saga.conf import SETTING_NAME, moved_keys, setting_of, validate


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E001: ``BSFT_SAGA`` has an unknown key or a bad value (the engine would refuse it
    at the first event). E002: ``USE_TZ=False`` makes every timer due time ambiguous."""
    messages: list[CheckMessage] = [
        Error(
            str(problem), hint="See docs/configuration.md.", obj=SETTING_NAME, id="bsft_saga.E001"
        )
        for problem in validate(getattr(settings, SETTING_NAME, None))
    ]
    if not settings.USE_TZ:
        messages.append(
            Error(
                "bsft_saga needs USE_TZ = True: timers are stored and compared as aware UTC times.",
                hint="Set USE_TZ = True in your settings.",
                obj="USE_TZ",
                id="bsft_saga.E002",
            )
        )
    return messages


@register(Tags.compatibility)
def check_moved_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W003: a key that moved from ``TIMEOUTS`` to ``DELIVERY`` (it governs the outbox as
    well as the timers) is still read from its old place, but only for one more release:
    the release after would reject it as an unknown option."""
    return [
        Warning(
            f"{setting_of('TIMEOUTS', key)} has moved to {setting_of('DELIVERY', key)}: it "
            "governs outbox rows as well as timers.",
            hint=f"Move it to {setting_of('DELIVERY', key)}; its old place is read for one "
            "more release. See docs/configuration.md.",
            obj=SETTING_NAME,
            id="bsft_saga.W003",
        )
        for key in moved_keys(getattr(settings, SETTING_NAME, None))
    ]


@register(Tags.compatibility)
def check_flows(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E010-E012: a flow that cannot be imported, built, or shares another's saga_type
    would silently never receive an event. E013-E016: an entry of ``previous_versions``
    that cannot be imported, has another saga_type, a version not lower than the flow's,
    or the version of another entry would leave the instances of that version with no
    definition to finish on (E011 also covers an entry whose ``configure()`` fails)."""
    from bsft_saga.flows.registry import flow_registry

    return [
        Error(problem.message, hint=problem.hint, obj=problem.obj, id=problem.check_id)
        for problem in flow_registry.problems
    ]


@register(Tags.compatibility)
def check_event_names(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E017: an event type name (or alias) claimed by two classes decodes every stored row
    of that name as the first class, whatever the second one meant."""
    from bsft_saga.events import registry

    return [
        Error(
            f"Event type name {conflict.name!r} is claimed by {conflict.kept_by} and, as "
            f"{'an alias' if conflict.claimed_as == 'alias' else 'its name'}, by "
            f"{conflict.claimed_by}; {conflict.kept_by} keeps it.",
            hint="Give each event class its own name. After a rename, keep the old name "
            "only in the aliases of the one class that replaced it.",
            obj=conflict.claimed_by,
            id="bsft_saga.E017",
        )
        for conflict in registry.event_registry.conflicts()
    ]


@register(Tags.compatibility)
def check_calendars(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E020: a calendar that cannot be built would make every step that schedules with
    it fail."""
    if validate(getattr(settings, SETTING_NAME, None)):
        return []  # E001 already says what is wrong
    from bsft_saga.calendars import check_calendars as problems

    return [
        Error(
            f"{SETTING_NAME}['CALENDARS'][{key!r}]: {message}",
            hint="BACKEND is a dotted path to a calendar class; OPTIONS its keyword arguments.",
            obj=SETTING_NAME,
            id="bsft_saga.E020",
        )
        for key, message in problems()
    ]


@register(Tags.database)
def check_partial_constraints(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """E003: the uniqueness bsft_saga relies on (one active instance per key, one pending
    timer per name) needs partial unique constraints, or on MariaDB and MySQL the unique
    indexes over generated columns of ``bsft_saga.db.mysql``, and the claim of due rows
    ``SKIP LOCKED`` there: without them concurrent events write duplicates."""
    from bsft_saga.db import mysql
    from bsft_saga.models import SagaInstance

    errors: list[CheckMessage] = []
    for alias in databases or ():
        connection = connections[alias]
        if not router.allow_migrate_model(alias, SagaInstance):
            continue
        if connection.vendor == "mysql":
            problem = mysql.unsupported_version(connection)
        elif not connection.features.supports_partial_indexes:
            problem = (
                f"The database backend {connection.display_name!r} cannot enforce a unique "
                "constraint with a condition"
            )
        else:
            continue
        if problem is None:
            continue
        errors.append(
            Error(
                f"{problem}: two active instances of one correlation key, or two pending "
                "timers of one name, could be written by concurrent events.",
                hint="Keep bsft_saga's tables on PostgreSQL (recommended), MariaDB 10.6+ or "
                "MySQL 8.0.11+, or SQLite (development); see docs/databases.md.",
                obj=f"DATABASES[{alias!r}]",
                id="bsft_saga.E003",
            )
        )
    return errors


@register(Tags.database)
def check_isolation_level(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """W004: on MariaDB and MySQL bsft_saga needs READ COMMITTED. Under REPEATABLE READ a
    transaction reads the snapshot of its first read: a step's version check, a claim's
    conditional update and the lookup of a key's active instance then compare against rows
    another transaction already changed, and fail or retry where they should see the
    newer row. (PostgreSQL's default is READ COMMITTED; SQLite serializes writers.)"""
    from bsft_saga.db import mysql
    from bsft_saga.models import SagaInstance

    warnings: list[CheckMessage] = []
    for alias in databases or ():
        connection = connections[alias]
        if connection.vendor != "mysql" or not router.allow_migrate_model(alias, SagaInstance):
            continue
        level = mysql.isolation_level(connection)
        if level in mysql.SAFE_ISOLATION_LEVELS:
            continue
        warnings.append(
            Warning(
                f"DATABASES[{alias!r}]['OPTIONS']['isolation_level'] is {level!r}: "
                "bsft_saga's version checks and claims need 'read committed' on "
                f"{connection.display_name}.",
                hint=f"Set DATABASES[{alias!r}]['OPTIONS']['isolation_level'] = "
                "'read committed' (Django's default for MySQL), or leave it out; see "
                "docs/databases.md.",
                obj=f"DATABASES[{alias!r}]",
                id="bsft_saga.W004",
            )
        )
    return warnings


@register(Tags.database)
def check_skip_locked(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """W001: without ``SELECT ... SKIP LOCKED`` concurrent dispatchers contend for the same
    rows (still correct, through conditional updates, but slower)."""
    if not databases or "default" not in databases:
        return []
    connection = connections["default"]
    # A MariaDB or MySQL without it is refused by E003, which names the version it needs.
    if connection.features.has_select_for_update_skip_locked or connection.vendor == "mysql":
        return []
    return [
        Warning(
            f"The database backend {connection.vendor!r} has no "
            "SELECT ... SKIP LOCKED; several timer dispatchers will contend for the same rows.",
            hint="Fine for development and a single dispatcher; use PostgreSQL in production.",
            obj="DATABASES['default']",
            id="bsft_saga.W001",
        )
    ]


@register(Tags.database, deploy=False)
def check_stored_rows(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """E050-E054, only with ``--database`` (and during ``migrate``): rows a deploy left
    behind that the installed code cannot run. Instances on an undeclared flow version
    (E050) or past their version's last step (E051) never move again; timers and outbox
    rows of an event type nobody knows (E052, E053) fail every attempt until they are
    dead-lettered; state that no longer decodes (E054) fails the instance's next step."""
    if not databases:
        return []  # no queries at startup
    from bsft_saga.db.stored_rows import find_problems

    return [
        Error(problem.message, hint=problem.hint, obj=problem.model, id=problem.check_id)
        for alias in databases
        for problem in find_problems(alias)
    ]


@register(Tags.security)
def check_audit_recorder(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E030: serving saga content (state, timer payloads) with no audit recorder behind it
    would leave reads of personal data untraced; the detail route refuses to run."""
    if validate(getattr(settings, SETTING_NAME, None)):
        return []
    from django.core.exceptions import ImproperlyConfigured

    from bsft_saga.audit import get_audit_recorder
    from bsft_saga.conf import saga_settings

    if not saga_settings.api.read_content_permission:
        return []
    try:
        recorder = get_audit_recorder()
    except ImproperlyConfigured as exc:
        problem = str(exc)
    else:
        if recorder is not None:
            return []
        problem = "READ_CONTENT_PERMISSION is set but AUDIT_RECORDER is None"
    return [
        Error(
            f"{SETTING_NAME}['API']: {problem}",
            hint="Keep the default 'bsft_saga.audit.ModelAuditRecorder', name your own "
            "recorder class, or set READ_CONTENT_PERMISSION to None to unmap the detail route.",
            obj=SETTING_NAME,
            id="bsft_saga.E030",
        )
    ]


@register(Tags.compatibility)
def check_retention_window(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W040: a ``RETENTION.OLDER_THAN`` shorter than ``MAX_CATCH_UP_AGE`` or a day purges
    finished instances while their start events may still be redelivered: a redelivered
    start event then starts the saga a second time (the de-duplication window of start
    events is the retention window)."""
    if validate(getattr(settings, SETTING_NAME, None)):
        return []  # E001 already says what is wrong
    from bsft_saga.conf import saga_settings
    from bsft_saga.retention.policy import minimum_safe_window

    window, safe = saga_settings.retention.older_than, minimum_safe_window()
    if window >= safe:
        return []
    return [
        Warning(
            f"{SETTING_NAME}['RETENTION']['OLDER_THAN'] ({window}) is shorter than {safe}, the "
            "longer of TIMEOUTS['MAX_CATCH_UP_AGE'] and a day: a start event redelivered after "
            "its finished instance was purged starts the saga again.",
            hint="Keep OLDER_THAN at least as long as MAX_CATCH_UP_AGE and a day; "
            "see docs/guarantees.md.",
            obj=SETTING_NAME,
            id="bsft_saga.W040",
        )
    ]


@register(Tags.compatibility)
def check_beat_schedule(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W002: a Celery app with a beat schedule that never runs the drain fires no timer, and
    never sweeps the outbox rows whose delivery was lost."""
    from bsft_saga.tasks import DRAIN_TASK, beat_schedule

    schedule = beat_schedule()
    if not schedule or any(entry.get("task") == DRAIN_TASK for entry in schedule.values()):
        return []
    return [
        Warning(
            f"The Celery beat schedule has no entry for {DRAIN_TASK!r}: no saga timer will fire.",
            hint=f"Add {{'task': {DRAIN_TASK!r}, 'schedule': POLL_INTERVAL}} to beat_schedule, "
            "or run `manage.py drain_saga_timeouts --loop`.",
            obj="beat_schedule",
            id="bsft_saga.W002",
        )
    ]
