"""The old home of :mod:`bsft_saga.timeouts.edits`, kept until the operations reference
points there."""

# fates: pending — docs/reference/operations.md documents bsft_saga.timeouts.levers.*;
# delete this module once it documents bsft_saga.timeouts.edits.* instead.
from bsft_saga.timeouts.edits import CancelReport, RescheduleReport, cancel_timers, reschedule_timer

__all__ = ["CancelReport", "RescheduleReport", "cancel_timers", "reschedule_timer"]
