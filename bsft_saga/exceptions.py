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


class PublishDepthExceeded(SagaError, RuntimeError):
    """Synchronous deliveries nested deeper than ``BSFT_SAGA["ENGINE"]["MAX_PUBLISH_DEPTH"]``.

    A step that publishes an event which reaches a saga (often its own) whose step publishes
    again, and so on, nests one delivery in another: ``publish()`` from a body sends the
    event at once, and what ``ctx.publish`` staged is delivered right after its window
    commits, before the code that caused it returns. Raised by the step one level too deep,
    before its bodies run, so it writes nothing; the message names its flow, its step and
    the event type. Where it goes from there is that delivery's: out of ``publish()``, or a
    failed attempt of the outbox row or timer being delivered, retried by the drain, which
    starts counting from one again.
    """

    def __init__(self, where: str, event_type: str, depth: int, limit: int) -> None:
        self.where = where
        self.event_type = event_type
        self.depth = depth
        self.limit = limit
        super().__init__(
            f"{where}: {event_type} reached this step {depth} synchronous deliveries deep, "
            f"more than BSFT_SAGA['ENGINE']['MAX_PUBLISH_DEPTH'] ({limit}). A step publishes "
            "an event that reaches a saga whose step publishes again: end the loop in the flow "
            "(a condition in the body, or a timer between the rounds), or raise the limit if "
            "the chain is meant to be this deep."
        )
