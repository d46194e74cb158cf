"""Signals sent by bsft_saga.

Receivers run synchronously inside ``Signal.send``: an exception raised by any of them
propagates to whoever published. Timer and outbox events are delivered *at least once*,
so a receiver with side effects must be idempotent (key it on ``envelope.message_id``).
"""

from __future__ import annotations

from django.dispatch import Signal

# The event aggregator. sender: the event's class. kwargs: envelope (bsft_saga.Envelope).
event_published = Signal()

# A deferred event's outbox row has committed and wants a worker to deliver it.
# sender: None. kwargs: message_id (uuid.UUID).
deferred_event_committed = Signal()
