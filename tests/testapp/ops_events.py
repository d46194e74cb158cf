"""Events of the operations test flows (drain, purge, requeue, admin, graph, poison row)."""

from __future__ import annotations

from dataclasses import dataclass

from bsft_saga import event


@event("tests.ops.reminder-requested")
@dataclass(frozen=True)
class ReminderRequested:
    key: str
    delay_seconds: int = 0


@event("tests.ops.reminder-due")
@dataclass(frozen=True)
class ReminderDue:
    key: str


@event("tests.ops.nudge-requested")
@dataclass(frozen=True)
class NudgeRequested:
    key: str


@event("tests.ops.nudge-sent")
@dataclass(frozen=True)
class NudgeSent:
    """No saga awaits it: plain receivers (e-mail, chat) would."""

    key: str


@event("tests.ops.noted")
@dataclass(frozen=True)
class Noted:
    """Published with ``defer=True`` by the drain tests: an outbox row nobody awaits."""

    note: str = ""


# The quote follow-up flow of docs/operations/flow-diagrams.md (its ``saga_graph`` example).


@event("tests.ops.quote-sent")
@dataclass(frozen=True)
class QuoteSent:
    quote_id: str


@event("tests.ops.quote-accepted")
@dataclass(frozen=True)
class QuoteAccepted:
    quote_id: str


@event("tests.ops.quote-withdrawn")
@dataclass(frozen=True)
class QuoteWithdrawn:
    quote_id: str


@event("tests.ops.quote-follow-up-due")
@dataclass(frozen=True)
class QuoteFollowUpDue:
    quote_id: str


@event("tests.ops.approval-requested")
@dataclass(frozen=True)
class ApprovalRequested:
    request_id: str


@event("tests.ops.approved")
@dataclass(frozen=True)
class Approved:
    request_id: str
