"""What a deploy left behind: stored rows that the installed code can no longer run.

Run by ``manage.py check --database <alias>`` and by ``migrate`` (the ``bsft_saga.E05x``
database checks in ``checks.py``), never at startup: every finding costs queries. Each
finding counts the rows, names what they have in common (a saga type and version, or an
event type) and gives one example id to look at:

- E050: active instances on a ``(saga_type, flow_version)`` that no installed flow declares;
- E051: active instances whose ``step_index`` is past the last step of their version
  (for a ``complete()`` flow, also those that handled the last step and did not complete:
  they were waiting for a step that a release removed);
- E052: pending or dead-lettered timers whose event type no ``@event`` name or alias knows;
- E053: pending or dead-lettered outbox rows of such an event type;
- E054: active instances whose state no longer decodes with their version's state class,
  found in a sample of each version's most recently updated instances.

Nothing is reported while bsft_saga's migrations are not all applied (``migrate`` runs
the checks before it migrates).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.migrations.loader import MigrationLoader
from django.db.models import Count, Max

# The deadline event is bsft_saga's own: make its type known even in a process that never
# handled an event (a fresh ``manage.py check``), or every deadline timer would be E052.
from bsft_saga.engine import deadlines  # noqa: F401
from bsft_saga.events import codec
from bsft_saga.events.registry import known_event_types
from bsft_saga.flows import registry
from bsft_saga.flows.definition import FlowDefinition

#: How many active instances of each flow version E054 decodes.
STATE_SAMPLE_SIZE = 100


@dataclass(frozen=True)
class StoredRowProblem:
    """One kind of stored row the installed code cannot handle, with how many there are."""

    check_id: str
    message: str
    hint: str
    model: Any  # the model class of the rows


def find_problems(using: str, *, sample_size: int = STATE_SAMPLE_SIZE) -> list[StoredRowProblem]:
    """Every problem of the rows stored in the database ``using``; [] before migrating."""
    if not migrations_applied(using):
        return []
    return [
        *_instance_problems(using, sample_size=sample_size),
        *_unknown_event_type_problems(using),
    ]


def migrations_applied(using: str) -> bool:
    """Whether every bsft_saga migration is applied to the database ``using``."""
    loader = MigrationLoader(connections[using], ignore_no_migrations=True)
    ours = {key for key in loader.graph.nodes if key[0] == "bsft_saga"}
    return ours <= set(loader.applied_migrations)


# -- instances ----------------------------------------------------------------------------------


def _instance_problems(using: str, *, sample_size: int) -> Iterator[StoredRowProblem]:
    from bsft_saga.models import SagaInstance

    active = SagaInstance.objects.using(using).active()
    by_version = (
        active.values_list("saga_type", "flow_version")
        .annotate(count=Count("pk"), highest_step=Max("step_index"))
        .order_by("saga_type", "flow_version")
    )
    for saga_type, flow_version, count, highest_step in by_version:
        on_version = active.filter(saga_type=saga_type, flow_version=flow_version)
        try:
            definition = registry.flow_registry.definition_for(saga_type, flow_version)
        except LookupError as exc:
            yield _undeclared_version(saga_type, flow_version, count, on_version, exc)
            continue
        if highest_step >= _first_step_index_past_the_end(definition):
            yield _past_last_step(definition, on_version)
        undecodable = _undecodable_state(definition, on_version, sample_size)
        if undecodable is not None:
            yield undecodable


def _undeclared_version(
    saga_type: str, flow_version: int, count: int, rows: Any, exc: LookupError
) -> StoredRowProblem:
    declared = getattr(exc, "declared", ())
    installed = (
        f"declared: {', '.join(map(str, declared))}"
        if declared
        else "no installed flow has this saga_type"
    )
    return StoredRowProblem(
        "bsft_saga.E050",
        f"{_count(count, 'active instance')} of {saga_type!r} "
        f"{'runs' if count == 1 else 'run'} on flow version {flow_version}, which no "
        f"installed flow declares ({installed}); e.g. instance {_first_pk(rows)}. An event "
        "or timer for such an instance fails with UnknownFlowVersion.",
        f"Install the release that declares version {flow_version} again, or keep that "
        "definition in the current flow's previous_versions until its instances complete.",
        rows.model,
    )


def _first_step_index_past_the_end(definition: FlowDefinition) -> int:
    # A complete() flow completes in the commit of its last step, so an active instance
    # that has handled as many steps as there are waits for one a release removed.
    # A build() flow stays active after its last step until a body calls mark_complete().
    steps = len(definition.steps)
    return steps if definition.auto_complete else steps + 1


def _past_last_step(definition: FlowDefinition, rows: Any) -> StoredRowProblem:
    steps = len(definition.steps)
    past = rows.filter(step_index__gte=_first_step_index_past_the_end(definition))
    count = past.count()
    return StoredRowProblem(
        "bsft_saga.E051",
        f"{_count(count, 'active instance')} of {definition.saga_type!r} flow version "
        f"{definition.version} {'is' if count == 1 else 'are'} past the last step of that "
        f"version (it has {steps} steps); e.g. instance {_first_pk(past)}. Such an "
        "instance awaits nothing and never completes.",
        f"Steps were removed from {definition.flow_name} (version {definition.version}) in "
        "place. Restore them there, and make the change a new version: raise "
        "SagaFlow.version and keep the old definition in previous_versions.",
        rows.model,
    )


def _undecodable_state(
    definition: FlowDefinition, rows: Any, sample_size: int
) -> StoredRowProblem | None:
    sample = list(rows.order_by("-updated_at", "pk").values_list("pk", "state")[:sample_size])
    failures = []
    for pk, state in sample:
        try:
            codec.decode(definition.state_class, state)
        except (TypeError, ValueError) as exc:
            failures.append((pk, exc))
    if not failures:
        return None
    first_pk, first_error = failures[0]
    return StoredRowProblem(
        "bsft_saga.E054",
        f"{len(failures)} of {_count(len(sample), 'sampled active instance')} of "
        f"{definition.saga_type!r} flow version {definition.version} "
        f"{'has' if len(failures) == 1 else 'have'} state that no longer decodes as "
        f"{definition.state_type}; e.g. instance {first_pk}: {first_error}",
        "Give every new state field a default and keep the type of every stored field; a "
        "state change that old rows cannot follow needs a new SagaFlow.version, with the "
        "old state class in the previous definition.",
        rows.model,
    )


# -- stored events ------------------------------------------------------------------------------


def _unknown_event_type_problems(using: str) -> Iterator[StoredRowProblem]:
    from bsft_saga.models import SagaOutboxMessage, SagaTimeout

    timers = SagaTimeout.objects.using(using)
    messages = SagaOutboxMessage.objects.using(using)
    yield from _unknown_event_types(
        "bsft_saga.E052",
        timers.pending() | timers.dead_lettered(),
        rows_are="pending or dead-lettered timer",
        example="timer",
        fails="when due or requeued",
    )
    yield from _unknown_event_types(
        "bsft_saga.E053",
        messages.pending() | messages.dead_lettered(),
        rows_are="pending or dead-lettered outbox row",
        example="outbox row",
        fails="when delivered or requeued",
    )


def _unknown_event_types(
    check_id: str, rows: Any, *, rows_are: str, example: str, fails: str
) -> Iterator[StoredRowProblem]:
    """One problem for each event type among ``rows`` that no class answers to."""
    known = known_event_types()
    by_type = rows.values_list("event_type").annotate(count=Count("pk")).order_by("event_type")
    for event_type, count in by_type:
        if event_type in known:
            continue
        first = _first_pk(rows.filter(event_type=event_type))
        yield StoredRowProblem(
            check_id,
            f"{_count(count, rows_are)} of event type {event_type!r}, which no "
            f"@event name or alias knows; e.g. {example} {first}. Each fails with "
            f"UnknownEventType {fails}.",
            "If the event class was renamed, list the old name in its aliases: "
            f"@event('new.name', aliases=({event_type!r},)). If its module is not imported "
            "at startup, import it from the app's events module.",
            rows.model,
        )


# -- wording ------------------------------------------------------------------------------------


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _first_pk(rows: Any) -> object:
    return rows.order_by("pk").values_list("pk", flat=True).first()
