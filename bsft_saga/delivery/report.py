"""What a delivery pass reports: one vocabulary for timers and outbox rows."""

from __future__ import annotations

import enum
import operator
from dataclasses import astuple, dataclass


class Outcome(enum.Enum):
    """What delivering one claimed row came to."""

    DELIVERED = "delivered"
    MISSED = "missed"  # retired unpublished by the catch-up policy (timers only)
    FAILED = "failed"  # an attempt failed; the row waits for its retry
    DEAD_LETTERED = "dead_lettered"
    UNCLAIMED = "unclaimed"  # canceled, replaced or taken over since it was claimed


@dataclass(frozen=True)
class DeliveryReport:
    """What one pass did with its rows.

    ``delivered``: published and retired (a timer *fired*); ``missed``: retired unpublished
    by the catch-up policy (timers only); ``failed``: an attempt failed and the row waits for
    its retry; ``dead_lettered``: given up at the attempt limit; ``unclaimed``: rows the pass
    was asked for or had claimed that another pass, a cancellation or a replacement took.
    """

    delivered: int = 0
    failed: int = 0
    dead_lettered: int = 0
    unclaimed: int = 0
    missed: int = 0

    def __add__(self, other: DeliveryReport) -> DeliveryReport:
        return DeliveryReport(*map(operator.add, astuple(self), astuple(other)))

    @property
    def settled(self) -> int:
        """Rows that stopped being pending (or being this pass's) in this pass.

        A failed attempt is not among them: the row waits for its back-off, and another pass
        right away would find it not ready.
        """
        return self.delivered + self.missed + self.dead_lettered + self.unclaimed
