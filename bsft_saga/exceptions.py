"""Exceptions raised by bsft_saga."""

from __future__ import annotations


class SagaError(Exception):
    """Base class of bsft_saga's own errors."""


class UnknownEventType(SagaError, LookupError):
    """A stored event type name has no registered ``@event`` class.

    Raised when a timer or outbox row is read back after a release renamed or removed
    the event class. The dispatcher counts it as a failed attempt of that row.
    """

    def __init__(self, event_type: str) -> None:
        self.event_type = event_type
        super().__init__(
            f"Unknown event type {event_type!r}: no class is registered with "
            f"@event({event_type!r}) or lists it in its aliases. Was the event renamed (keep "
            f"the old name: @event('new.name', aliases=({event_type!r},))) or its module "
            "not imported?"
        )


class UnknownFlowVersion(SagaError, LookupError):
    """An active instance started under a flow version that no installed flow declares.

    Raised by the step that an event or timer for that instance would run (a timer
    counts a failed attempt, ``publish`` raises), so the instance is never advanced with
    the steps of another version. Deploy the release that declares the version again, or
    list its definition in the current flow's ``previous_versions``.
    """

    def __init__(self, saga_type: str, flow_version: int, declared: tuple[int, ...]) -> None:
        self.saga_type = saga_type
        self.flow_version = flow_version
        self.declared = declared
        if declared:
            installed = f"the installed flow declares version(s) {', '.join(map(str, declared))}"
        else:
            installed = "no installed flow has this saga_type"
        super().__init__(
            f"Unknown flow version {flow_version} of {saga_type!r}: {installed}. Keep the "
            f"definition of version {flow_version} in the flow's previous_versions until "
            "its instances complete."
        )


class FlowDefinitionError(SagaError, ValueError):
    """A flow's ``configure()`` describes something the engine cannot run."""


class SagaConcurrencyError(SagaError):
    """An event kept losing the optimistic-concurrency race for one saga instance."""
