"""``SagaHarness``: run flows against a frozen clock, in your own test suite.

Time stands still at ``start`` for the whole process, in all threads (freezegun), and
moves only through ``advance_time``. Timers fire through the real dispatcher, so a test
drains exactly what production would. No wall-clock waits.
"""

from __future__ import annotations

try:  # first: the hint must come before anything that needs Django's settings
    from freezegun import freeze_time
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"bsft_saga.testing needs {exc.name}, which a plain install of bsft-saga does not "
        "bring: pip install 'bsft-saga[testing]' (freezegun and pytest-django)",
        name=exc.name,
    ) from exc

from collections.abc import Iterable
from contextlib import ExitStack
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from django.db.models import Min
from django.utils.module_loading import import_string

from bsft_saga import clock
from bsft_saga.draining import Until, drain, drain_round
from bsft_saga.events import codec
from bsft_saga.events.envelope import Envelope
from bsft_saga.flows import activation
from bsft_saga.flows.registry import flow_registry
from bsft_saga.models import SagaInstance, SagaOutboxMessage, SagaTimeout
from bsft_saga.outbox import deliver_pending
from bsft_saga.publishing import publish
from bsft_saga.querysets import SagaTimeoutQuerySet


class SagaHarness:
    """Publish events, move time, and inspect sagas, deterministically.

    Use as a context manager (or ``start()``/``stop()``), or through the ``saga_harness``
    pytest fixture. ``start`` defaults to the current time, truncated to the second.

    ``flows`` (flow classes, dotted paths to them, or saga types) activates only those
    flows while the harness runs: events for any other flow create and advance nothing,
    its deadlines included. ``None`` (the default) keeps every registered flow active.
    """

    def __init__(
        self, start: datetime | None = None, *, flows: Iterable[type | str] | None = None
    ) -> None:
        if start is not None and (start.tzinfo is None or start.utcoffset() is None):
            raise ValueError("SagaHarness(start=...) must be an aware datetime")
        self._start = start
        self._saga_types = None if flows is None else [_saga_type_of(flow) for flow in flows]
        self._freezer: Any = None
        self._frozen: Any = None
        self._scopes = ExitStack()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> SagaHarness:
        moment = self._start or clock.now().replace(microsecond=0)
        self._freezer = freeze_time(moment, tick=False)
        self._frozen = self._freezer.start()
        if self._saga_types is not None:
            self._scopes.enter_context(activation.only(self._saga_types))
        return self

    def stop(self) -> None:
        self._scopes.close()
        if self._freezer is not None:
            self._freezer.stop()
            self._freezer = self._frozen = None

    def __enter__(self) -> SagaHarness:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def now(self) -> datetime:
        return clock.now()

    # -- driving --------------------------------------------------------------------------

    def publish(self, event: Any, **kwargs: Any) -> Envelope:
        """``bsft_saga.publish(event, **kwargs)``, then deliver what the steps published."""
        envelope = publish(event, **kwargs)
        self._deliver_outbox()
        return envelope

    def drain_timeouts(self) -> int:
        """Drain until a round finds nothing to do; return how many timers stopped being due.

        The loop of the Celery task and the command (``bsft_saga.draining.drain``). A timer
        whose receivers fail waits for its retry back-off like in production: it is tried
        again once ``advance_time`` has moved the clock past its ``next_attempt_at``.
        """
        return drain(Until.EMPTY).timers.settled

    def advance_time(self, delta: timedelta) -> int:
        """Move the clock by ``delta``, firing each timer at its own due time, in order,
        and delivering each delayed message at its ``deliver_at``.

        Retries happen on the way too: a timer (or outbox row) that fails is tried again at
        its ``next_attempt_at`` if that falls inside ``delta``. Returns how many timers
        stopped being due (fired, missed, dead-lettered, or canceled by a step woken on the
        way).
        """
        if self._frozen is None:
            raise RuntimeError("SagaHarness is not started: use it as a context manager")
        if delta < timedelta(0):
            raise ValueError("advance_time() cannot move the clock backwards")
        target = clock.now() + delta
        settled = self.drain_timeouts()
        while True:
            next_ready = self._next_ready(target)
            if next_ready is None:
                break
            if next_ready > clock.now():
                self._frozen.move_to(next_ready)
            report = drain_round()
            settled += report.timers.settled + self.drain_timeouts()
            failed = report.timers.failed or report.outbox.failed
            if next_ready <= clock.now() and not (report.found_work or failed):
                break  # held by a live claim elsewhere: nothing this harness can fire
        self._frozen.move_to(target)
        return settled + self.drain_timeouts()

    def _next_ready(self, until: datetime) -> datetime | None:
        """When the next pending timer or outbox row becomes ready (due, a delayed
        message's ``deliver_at``, or past its back-off)."""
        moments = (SagaTimeout.objects.first_ready_at(), SagaOutboxMessage.objects.first_ready_at())
        ready = min((moment for moment in moments if moment is not None), default=None)
        return ready if ready is not None and ready <= until else None

    def _deliver_outbox(self) -> None:
        while deliver_pending().delivered:
            pass

    # -- inspecting -----------------------------------------------------------------------

    def get_saga(self, flow: type | str, key: str | None = None) -> SagaInstance | None:
        """The newest instance of ``flow`` (class or saga type) for ``key``, complete or not."""
        definition = flow_registry.get(flow)
        # Under a frozen clock several instances share created_at; the first inbox row of
        # each (written in the transaction that created it) orders them by creation.
        return (
            SagaInstance.objects.for_key(definition.saga_type, key or "")
            .annotate(first_handled=Min("inbox_entries__id"))
            .order_by("-created_at", "-first_handled")
            .first()
        )

    def state(self, flow: type | str, key: str | None = None) -> Any:
        """The decoded state dataclass of the newest instance; ``LookupError`` if none.

        Decoded with the state class of the flow version the instance started under
        (``UnknownFlowVersion`` if no installed flow declares it).
        """
        instance = self.get_saga(flow, key)
        if instance is None:
            raise LookupError(f"no {flow!r} instance for key {key!r}")
        definition = flow_registry.definition_for(instance.saga_type, instance.flow_version)
        return codec.decode(definition.state_class, instance.state)

    def timeouts(self, flow: type | str, key: str | None = None) -> SagaTimeoutQuerySet:
        """Every timer row of the newest instance, oldest due first."""
        instance = self.get_saga(flow, key)
        if instance is None:
            return SagaTimeout.objects.none()
        return SagaTimeout.objects.filter(saga=instance).order_by("due_at", "id")


def _saga_type_of(flow: type | str) -> str:
    """The saga type of a flow class, a dotted path to one, or a saga type."""
    if isinstance(flow, str):
        try:
            return flow_registry.get(flow).saga_type
        except LookupError:
            try:
                flow = import_string(flow)
            except ImportError as exc:
                raise LookupError(
                    f"SagaHarness(flows=...): {flow!r} is neither a registered saga type nor "
                    f"an importable flow class ({exc})"
                ) from None
    if not isinstance(flow, type):
        raise TypeError(f"SagaHarness(flows=...): {flow!r} is not a flow class")
    return flow_registry.get(flow).saga_type
