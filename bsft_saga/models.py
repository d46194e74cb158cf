"""Saga rows: instances, their inbox, outbox and timers.

Rows and query vocabulary only: no validation or side effect hides in ``save()``. The
services write them — the engine's persistence window, the delivery passes, and the
operators' services (terminate, fire now, requeue, purge, erase), each through its own
module — never a model method.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils.translation import gettext_lazy as _

from bsft_saga import clock
from bsft_saga.db.mysql import VendorModelChecks
from bsft_saga.moments import format_moment
from bsft_saga.querysets import (
    DeliveryStatus,
    SagaInstanceQuerySet,
    SagaKeptEventQuerySet,
    SagaOutboxQuerySet,
    SagaTimeoutQuerySet,
    kept_status,
    outbox_due_at,
    outbox_status,
    timer_status,
)


class SagaInstance(VendorModelChecks, models.Model):
    """One running (or finished) instance of a flow, keyed by its correlation key."""

    id = models.UUIDField(_("id"), primary_key=True, default=uuid.uuid4, editable=False)
    saga_type = models.CharField(
        _("saga type"), max_length=200, help_text=_("The flow's stable saga_type name.")
    )
    correlation_key = models.CharField(
        _("correlation key"),
        max_length=200,
        blank=True,
        help_text=_("Key the flow computed from its events; empty for single-instance flows."),
    )
    state_type = models.CharField(
        _("state type"), max_length=300, help_text=_("Dotted path of the state dataclass.")
    )
    state = models.JSONField(_("state"), default=dict, help_text=_("The state dataclass as JSON."))
    step_index = models.PositiveIntegerField(
        _("step index"),
        default=0,
        help_text=_("Steps handled so far: 1 after the start step, n+1 after the n-th wait."),
    )
    is_complete = models.BooleanField(_("complete"), default=False)
    created_at = models.DateTimeField(_("created at"))
    updated_at = models.DateTimeField(_("updated at"), help_text=_("Time of the last transition."))
    completed_at = models.DateTimeField(_("completed at"), null=True, blank=True)
    deadline = models.DateTimeField(
        _("deadline"),
        null=True,
        blank=True,
        help_text=_("Absolute deadline of the whole saga (with_deadline), carried by its events."),
    )
    version = models.PositiveIntegerField(
        _("version"), default=1, help_text=_("Optimistic-concurrency token, +1 per transition.")
    )
    flow_version = models.PositiveIntegerField(
        _("flow version"),
        default=1,
        help_text=_("SagaFlow.version the instance started under; it keeps that version's steps."),
    )
    terminated_reason = models.TextField(
        _("terminated reason"),
        blank=True,
        default="",
        help_text=_("Why an operator terminated the instance; blank unless it was terminated."),
    )

    objects = SagaInstanceQuerySet.as_manager()

    class Meta:
        verbose_name = _("saga instance")
        verbose_name_plural = _("saga instances")
        permissions = [
            ("read_saga_content", _("Can read saga state and timer payloads")),
            ("terminate_saga", _("Can terminate a saga instance")),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["saga_type", "correlation_key"],
                condition=Q(is_complete=False),
                name="bsft_saga_one_active_instance_per_key",
            ),
        ]
        indexes = [
            models.Index(
                fields=["saga_type", "correlation_key", "-created_at"],
                name="bsft_saga_instance_key_idx",
            ),
            models.Index(fields=["-updated_at"], name="bsft_saga_instance_updated_idx"),
            # Retention: completed instances by age (purge_saga_data).
            models.Index(
                fields=["completed_at"],
                name="bsft_saga_instance_done_idx",
                condition=Q(is_complete=True),
            ),
        ]

    #: The progress metadata: every field but the content (``state``). The HTTP list and
    #: the admin show these to anyone allowed to see sagas at all.
    PROGRESS_FIELDS = (
        "id",
        "saga_type",
        "correlation_key",
        "state_type",
        "step_index",
        "flow_version",
        "is_complete",
        "created_at",
        "updated_at",
        "completed_at",
        "deadline",
        "version",
    )

    def __str__(self) -> str:
        """``orders[A-1] step 2`` while active; once complete, as the admin's picture says
        it: ``complete``, or ``terminated at step 1``. A completed saga waits at no step:
        after its last step its ``step_index`` names none of the flow's."""
        key = self.correlation_key or "-"
        if self.terminated_reason:
            return f"{self.saga_type}[{key}] terminated at step {self.step_index}"
        if self.is_complete:
            return f"{self.saga_type}[{key}] complete"
        return f"{self.saga_type}[{key}] step {self.step_index}"


class SagaInboxEntry(models.Model):
    """A message id an instance has handled; makes handling idempotent per instance."""

    # No index of its own: the unique constraint's (saga, message_id) index serves every
    # lookup by saga, and one index fewer is written with each handled event.
    saga = models.ForeignKey(
        SagaInstance,
        verbose_name=_("saga"),
        on_delete=models.CASCADE,
        related_name="inbox_entries",
        db_index=False,
    )
    message_id = models.UUIDField(_("message id"))
    event_type = models.CharField(_("event type"), max_length=200)
    handled_at = models.DateTimeField(_("handled at"))

    class Meta:
        verbose_name = _("saga inbox entry")
        verbose_name_plural = _("saga inbox entries")
        constraints = [
            models.UniqueConstraint(
                fields=["saga", "message_id"], name="bsft_saga_inbox_once_per_saga"
            ),
        ]
        indexes = [models.Index(fields=["message_id"], name="bsft_saga_inbox_message_idx")]

    def __str__(self) -> str:
        return f"{self.event_type} {self.message_id}"


class DeliveryRow(models.Model):
    """The columns a timer, an outbox message and a kept event share: one delivery
    machinery (``bsft_saga.delivery``). ``querysets.DeliveryStatus`` names their states."""

    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    last_error = models.TextField(_("last error"), blank=True)
    next_attempt_at = models.DateTimeField(
        _("next attempt at"),
        null=True,
        blank=True,
        help_text=_("After a failed attempt: not tried again before this (retry back-off)."),
    )
    dead_lettered_at = models.DateTimeField(_("dead-lettered at"), null=True, blank=True)
    claim_token = models.UUIDField(_("claim token"), null=True, blank=True, editable=False)
    claimed_until = models.DateTimeField(_("claimed until"), null=True, blank=True)
    claimed_by = models.UUIDField(
        _("claimed by"),
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "The dispatcher (SagaDispatcher id) whose pass claimed the row last; null when "
            "no reporting dispatcher did (a test harness, code calling a drain)."
        ),
    )
    trace_context = models.JSONField(
        _("trace context"),
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "The W3C trace context (traceparent and, when set, tracestate) of the code "
            "that wrote the row; null when no tracer provider was installed."
        ),
    )

    class Meta:
        abstract = True

    def status(self, now: datetime | None = None) -> DeliveryStatus:
        """Where the row is in its delivery lifecycle at ``now`` (default: the clock)."""
        raise NotImplementedError


class SagaKeptEvent(VendorModelChecks, DeliveryRow):
    """An event that reached its saga before the step that awaits it (``keep_early=True``),
    or reached a key with no active saga yet (``saga`` null: kept for the saga that starts
    for ``saga_type`` and ``correlation_key`` within ``ENGINE.KEEP_EARLY_FOR``).

    Written once per message id; applied to its one saga (never published again) when that
    saga reaches ``step_index``, with the attempts, retry back-off and dead letter of timers
    and outbox rows; deleted by the window that applies it, or discarded (counted ignored,
    ``not_awaited``) by the commit that moves its saga past the last step that could take it.
    """

    # Looked up by saga down the (saga, message_id) and (saga, step_index, kept_at) indexes.
    saga = models.ForeignKey(
        SagaInstance,
        verbose_name=_("saga"),
        on_delete=models.CASCADE,
        related_name="kept_events",
        db_index=False,
        null=True,
        blank=True,
        help_text=_("Null while no saga of its key is active yet (kept before its saga started)."),
    )
    saga_type = models.CharField(_("saga type"), max_length=200, blank=True)
    correlation_key = models.CharField(_("correlation key"), max_length=200, blank=True)
    step_index = models.PositiveIntegerField(
        _("step index"), help_text=_("The step that keeps the event: it is applied there.")
    )
    event_type = models.CharField(_("event type"), max_length=200)
    payload = models.JSONField(_("payload"))
    message_id = models.UUIDField(_("message id"))
    correlation_id = models.CharField(_("correlation id"), max_length=200, blank=True)
    causation_id = models.UUIDField(_("causation id"), null=True, blank=True)
    deadline = models.DateTimeField(_("deadline"), null=True, blank=True)
    published_at = models.DateTimeField(_("published at"), null=True, blank=True)
    kept_at = models.DateTimeField(_("kept at"))
    next_attempt_at = models.DateTimeField(
        _("next attempt at"),
        null=True,
        blank=True,
        help_text=_(
            "Set when its saga reaches its step: not applied before this (later, after a "
            "failed attempt: the retry back-off). Null while it waits for its step."
        ),
    )

    objects = SagaKeptEventQuerySet.as_manager()

    class Meta:
        verbose_name = _("saga kept event")
        verbose_name_plural = _("saga kept events")
        constraints = [
            models.UniqueConstraint(
                fields=["saga", "message_id"], name="bsft_saga_kept_once_per_saga"
            ),
            # Kept before its saga started: once per key and message id (a redelivery).
            models.UniqueConstraint(
                fields=["saga_type", "correlation_key", "message_id"],
                condition=Q(saga__isnull=True),
                name="bsft_saga_kept_once_per_key",
            ),
        ]
        indexes = [
            models.Index(fields=["saga", "step_index", "kept_at"], name="bsft_saga_kept_step_idx"),
            # What a pass applies: rows whose saga is at their step, by the time they are
            # ready. A row waiting for a later step (the many) is not in it.
            models.Index(
                fields=["next_attempt_at", "id"],
                name="bsft_saga_kept_ready_idx",
                condition=Q(next_attempt_at__isnull=False, dead_lettered_at__isnull=True),
            ),
            models.Index(
                fields=["dead_lettered_at"],
                name="bsft_saga_kept_dead_idx",
                condition=Q(dead_lettered_at__isnull=False),
            ),
            # Kept before their saga started, by age: the drain discards them past the window.
            models.Index(
                fields=["kept_at"],
                name="bsft_saga_kept_unowned_idx",
                condition=Q(saga__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.message_id}"

    def status(self, now: datetime | None = None) -> DeliveryStatus:
        """Where the kept event is at ``now`` (default: the clock): waiting for its step,
        ready, retrying, claimed or dead-lettered."""
        return kept_status(self, now or clock.now())


class SagaOutboxMessage(VendorModelChecks, DeliveryRow):
    """An event waiting to be published after the transaction that staged it committed.

    Written by a step's ``ctx.publish`` (``saga`` set) or ``publish(..., defer=True)``.
    Delivered at least once: after commit, or later by the drain if the process died. A
    delayed message (``deliver_at`` set: ``publish(..., delay=...)``) is delivered by the
    drain only, once ``deliver_at`` has come.
    """

    id = models.UUIDField(
        _("message id"),
        primary_key=True,
        default=uuid.uuid4,
        editable=False,
        help_text=_("The message_id of the envelope this row publishes."),
    )
    saga = models.ForeignKey(
        SagaInstance,
        verbose_name=_("saga"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="outbox_messages",
    )
    event_type = models.CharField(_("event type"), max_length=200)
    payload = models.JSONField(_("payload"))
    correlation_id = models.CharField(_("correlation id"), max_length=200, blank=True)
    causation_id = models.UUIDField(_("causation id"), null=True, blank=True)
    deadline = models.DateTimeField(_("deadline"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"))
    deliver_at = models.DateTimeField(
        _("deliver at"),
        null=True,
        blank=True,
        help_text=_(
            "A delayed message: no pass delivers it before this. Null: deliver at once "
            "(from created_at)."
        ),
    )
    delivered_at = models.DateTimeField(_("delivered at"), null=True, blank=True)

    objects = SagaOutboxQuerySet.as_manager()

    class Meta:
        verbose_name = _("saga outbox message")
        verbose_name_plural = _("saga outbox messages")
        indexes = [
            # Pending rows by the time they are due (deliver_at, else created_at): what
            # saga_status counts, and the oldest of them that is late.
            models.Index(
                outbox_due_at(),
                name="bsft_saga_outbox_pending_idx",
                condition=Q(delivered_at__isnull=True, dead_lettered_at__isnull=True),
            ),
            # What a delivery pass claims: pending rows in the order they become ready (a
            # row waiting for its retry back-off at next_attempt_at, a delayed message at
            # deliver_at, any other at created_at).
            models.Index(
                Coalesce("next_attempt_at", *SagaOutboxQuerySet.ready_fields),
                F("id"),
                name="bsft_saga_outbox_ready_idx",
                condition=Q(delivered_at__isnull=True, dead_lettered_at__isnull=True),
            ),
            models.Index(
                fields=["dead_lettered_at"],
                name="bsft_saga_outbox_dead_idx",
                condition=Q(dead_lettered_at__isnull=False),
            ),
            # Retention: delivered rows by age (purge_saga_data).
            models.Index(
                fields=["delivered_at"],
                name="bsft_saga_outbox_delivered_idx",
                condition=Q(delivered_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.id}"

    def status(self, now: datetime | None = None) -> DeliveryStatus:
        """Where the row is in its delivery lifecycle at ``now`` (default: the clock)."""
        return outbox_status(self, now or clock.now())


class TimeoutOutcome(models.TextChoices):
    FIRED = "fired", _("fired")
    MISSED = "missed", _("missed")
    CANCELED = "canceled", _("canceled")
    DEAD_LETTERED = "dead_lettered", _("dead-lettered")


class TimeoutScope(models.TextChoices):
    STEP = "step", _("step")
    SAGA = "saga", _("saga")


class SagaTimeout(VendorModelChecks, DeliveryRow):
    """A durable named timer of one saga instance.

    Pending while ``dispatched_at`` is null; ``(saga, name)`` is unique among pending rows.
    ``dispatched_at`` marks every way a timer leaves the pending set; ``outcome`` says which.
    """

    saga = models.ForeignKey(
        SagaInstance, verbose_name=_("saga"), on_delete=models.CASCADE, related_name="timeouts"
    )
    name = models.CharField(_("name"), max_length=200)
    due_at = models.DateTimeField(_("due at"))
    event_type = models.CharField(_("event type"), max_length=200)
    payload = models.JSONField(_("payload"), help_text=_("The timer's event as JSON."))
    message_id = models.UUIDField(
        _("message id"),
        default=uuid.uuid4,
        help_text=_("Message id of the event this timer publishes; stable across retries."),
    )
    calendar_key = models.CharField(_("calendar"), max_length=100, blank=True)
    correlation_id = models.CharField(_("correlation id"), max_length=200, blank=True)
    scope = models.CharField(
        _("scope"), max_length=10, choices=TimeoutScope.choices, default=TimeoutScope.STEP
    )
    # A database default too: rows written by code that predates the column (a rolling
    # deploy's old processes, a bulk INSERT of its own) are timers like any other.
    ignore_deadline = models.BooleanField(
        _("ignores the deadline"),
        default=False,
        db_default=False,
        help_text=_(
            "Scheduled with ignore_deadline=True: its event carries no deadline "
            "(compensation retried by a timer)."
        ),
    )
    scheduled_step_index = models.PositiveIntegerField(
        _("scheduled at step"), help_text=_("The saga's step_index when the timer was scheduled.")
    )
    scheduled_at = models.DateTimeField(_("scheduled at"))
    dispatched_at = models.DateTimeField(_("dispatched at"), null=True, blank=True)
    # Null, not "", while pending: a pending timer has no outcome yet, and the HTTP API and
    # `saga_status` show it as null rather than as an empty outcome.
    outcome = models.CharField(  # noqa: DJ001
        _("outcome"), max_length=20, choices=TimeoutOutcome.choices, null=True, blank=True
    )
    dead_letter_reason = models.TextField(_("dead-letter reason"), blank=True)

    objects = SagaTimeoutQuerySet.as_manager()

    class Meta:
        verbose_name = _("saga timeout")
        verbose_name_plural = _("saga timeouts")
        constraints = [
            models.UniqueConstraint(
                fields=["saga", "name"],
                condition=Q(dispatched_at__isnull=True),
                name="bsft_saga_one_pending_timeout_name",
            ),
        ]
        indexes = [
            models.Index(
                fields=["due_at", "id"],
                name="bsft_saga_timeout_due_idx",
                condition=Q(dispatched_at__isnull=True),
            ),
            # What a timer pass claims: pending rows in the order they become ready
            # (a row waiting for its retry back-off is ready at next_attempt_at).
            models.Index(
                Coalesce("next_attempt_at", "due_at"),
                F("id"),
                name="bsft_saga_timeout_ready_idx",
                condition=Q(dispatched_at__isnull=True),
            ),
            # Retired rows only: a pending row never enters it, and the planner cannot pick
            # it to find pending rows ("dispatched_at IS NULL") instead of the ready index.
            models.Index(
                fields=["dispatched_at"],
                name="bsft_saga_timeout_retired_idx",
                condition=Q(dispatched_at__isnull=False),
            ),
            models.Index(
                fields=["dead_lettered_at"],
                name="bsft_saga_timeout_dead_idx",
                condition=Q(dead_lettered_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} due {format_moment(self.due_at)}"

    @property
    def is_pending(self) -> bool:
        return self.dispatched_at is None

    def status(self, now: datetime | None = None) -> DeliveryStatus:
        """Where the timer is in its lifecycle at ``now`` (default: the clock)."""
        return timer_status(self, now or clock.now())


class JournalKind(models.TextChoices):
    """What a journal entry records."""

    STARTED = "started", _("started")
    ADVANCED = "advanced", _("advanced")
    HANDLED = "handled", _("handled")  # a meanwhile handler: the step stays
    COMPLETED = "completed", _("completed")
    EXPIRED = "expired", _("deadline expired")
    TIMER_FIRED = "timer_fired", _("timer fired")  # its event woke no step of its saga
    TIMER_MISSED = "timer_missed", _("timer missed")  # the catch-up policy discarded it
    DEAD_LETTERED = "dead_lettered", _("dead-lettered")  # one of its timers or outbox rows
    TERMINATED = "terminated", _("terminated")
    FIRED_NOW = "fired_now", _("timer fired now")
    REQUEUED = "requeued", _("requeued")
    TIMER_CANCELED = "timer_canceled", _("timer canceled")
    TIMER_RESCHEDULED = "timer_rescheduled", _("timer rescheduled")


class JournalVia(models.TextChoices):
    """What delivered the event (or action) a journal entry records."""

    PUBLISH = "publish", _("publish")
    TIMER = "timer", _("timer")
    OUTBOX = "outbox", _("outbox")
    KEPT = "kept", _("kept event")
    OPERATOR = "operator", _("operator")


class SagaJournalEntry(models.Model):
    """One transition of an instance, or one operator action on it: its history.

    Written in the commit of what it records. Metadata only, never state or payload: it is
    shown to anyone allowed to see sagas, and removed with its instance.
    """

    id = models.BigAutoField(primary_key=True)
    # Looked up by saga down bsft_saga_journal_saga_idx, whose first column it is.
    saga = models.ForeignKey(
        SagaInstance,
        verbose_name=_("saga"),
        on_delete=models.CASCADE,
        related_name="journal",
        db_index=False,
    )
    at = models.DateTimeField(_("at"))
    kind = models.CharField(_("kind"), max_length=20, choices=JournalKind.choices)
    event_type = models.CharField(_("event type"), max_length=200, blank=True)
    message_id = models.UUIDField(_("message id"), null=True, blank=True)
    step_before = models.PositiveIntegerField(_("step before"), null=True, blank=True)
    step_after = models.PositiveIntegerField(_("step after"), null=True, blank=True)
    version = models.PositiveIntegerField(
        _("version"), null=True, blank=True, help_text=_("The instance's version after it.")
    )
    via = models.CharField(_("via"), max_length=10, choices=JournalVia.choices)
    timer_name = models.CharField(_("timer name"), max_length=200, blank=True)
    user = models.CharField(
        _("user"), max_length=150, blank=True, help_text=_("The operator's username, if any.")
    )
    correlation_id = models.CharField(_("correlation id"), max_length=200, blank=True)

    class Meta:
        verbose_name = _("saga journal entry")
        verbose_name_plural = _("saga journal entries")
        indexes = [
            models.Index(fields=["saga", "-at", "-id"], name="bsft_saga_journal_saga_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.event_type or self.timer_name} at {self.at:%Y-%m-%d %H:%M:%S}"


class DispatcherKind(models.TextChoices):
    LOOP = "loop", _("drain_saga_timeouts --loop")
    CELERY = "celery", _("Celery drain task")


class SagaDispatcher(models.Model):
    """A process that runs delivery passes, reporting in: its heartbeat.

    ``id`` is the process's identity, generated when it starts; the rows its passes claim
    name it in ``claimed_by``.
    """

    id = models.UUIDField(_("id"), primary_key=True, default=uuid.uuid4, editable=False)
    host = models.CharField(_("host"), max_length=255)
    pid = models.PositiveIntegerField(_("pid"))
    kind = models.CharField(_("kind"), max_length=20, choices=DispatcherKind.choices)
    started_at = models.DateTimeField(_("started at"))
    last_pass_at = models.DateTimeField(_("last pass at"), null=True, blank=True)
    delivered = models.PositiveBigIntegerField(
        _("delivered"), default=0, help_text=_("Rows its passes delivered since it started.")
    )
    claims = models.PositiveIntegerField(
        _("claims held"),
        default=0,
        help_text=_("Rows its pass in progress claimed; 0 between passes."),
    )

    class Meta:
        verbose_name = _("saga dispatcher")
        verbose_name_plural = _("saga dispatchers")
        indexes = [models.Index(fields=["-last_pass_at"], name="bsft_saga_dispatcher_pass_idx")]

    def __str__(self) -> str:
        return f"{self.kind} {self.host}:{self.pid}"


class SagaAuditRecord(models.Model):
    """Who read saga content through the HTTP surface (``ModelAuditRecorder``)."""

    action = models.CharField(_("action"), max_length=100)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("user"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    username = models.CharField(
        _("username"), max_length=150, blank=True, help_text=_("Kept if the user is deleted.")
    )
    saga_type = models.CharField(_("saga type"), max_length=200)
    correlation_key = models.CharField(_("correlation key"), max_length=200, blank=True)
    instance_id = models.UUIDField(_("instance id"), null=True, blank=True)
    correlation_id = models.CharField(_("correlation id"), max_length=200, blank=True)
    recorded_at = models.DateTimeField(_("recorded at"))

    class Meta:
        verbose_name = _("saga audit record")
        verbose_name_plural = _("saga audit records")
        indexes = [models.Index(fields=["-recorded_at"], name="bsft_saga_audit_recorded_idx")]

    def __str__(self) -> str:
        return f"{self.action} {self.saga_type} by {self.username or '-'}"
