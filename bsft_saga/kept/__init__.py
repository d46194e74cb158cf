"""Kept events: an event that reached its saga before the step that awaits it.

A wait declared with ``keep_early=True`` keeps an event of its type that reaches an active
saga at an earlier step (one that does not await the type), and one that reaches a key with
no active saga yet (for ``ENGINE.KEEP_EARLY_FOR``: the saga that starts for the key takes
it). Keeping is a window of its own: a version-checked ``UPDATE`` of the saga that leaves
its version as it is (so keeping and the commit that moves the saga on are serialised,
whichever loses re-plans against the other's result, and the journal's versions follow one
another), and the ``SagaKeptEvent`` row, unique per saga (or key) and message id (so a
redelivered event is kept once, as the inbox handles it once). At most
``ENGINE.MAX_KEPT_EVENTS_PER_SAGA`` rows per saga (or key).

A kept event is a row of the third delivery channel (:data:`KEPT`): it has the attempts,
retry back-off, dead letter and requeue of timers and outbox rows, and their claim (a
process killed while applying one is charged that attempt), but it is applied to its one
saga, never published to every receiver. Every commit that moves a saga of a flow that
keeps events settles its kept rows (:func:`move_on`, called by the window): a row for a step
the saga passed goes to the next step that awaits its type, or is discarded (counted ignored,
``not_awaited``) if none does; a row for the step reached becomes ready
(``next_attempt_at``). That commit's ``on_commit`` applies the ready rows oldest first,
each in a window of its own (``handler.apply_kept``), which deletes the row it applies.
A crash between the two, a failed attempt whose back-off has run out, or a requeue leaves
ready rows behind: the drain pass applies them (``handler.apply_stragglers``), found through
the partial index of ready rows.

The package's modules, one job each: ``keeping`` (writing a kept row), ``settling`` (what
a commit that moves a saga does to its rows), ``discarding`` (dropping rows no step will
apply), ``applying`` (finding and claiming the next row to apply), ``rows`` (the envelope
a row holds), ``channel`` (:class:`KeptChannel`) and ``requeue``.
"""

from __future__ import annotations

from bsft_saga.kept.applying import claim, next_kept, ready_sagas, release, unadopted
from bsft_saga.kept.channel import KEPT, KeptChannel
from bsft_saga.kept.discarding import discard, discard_expired
from bsft_saga.kept.keeping import DUPLICATE, KEPT_NOW, OVER_LIMIT, LostRace, keep, keep_for_key
from bsft_saga.kept.requeue import requeue_dead_lettered
from bsft_saga.kept.rows import envelope_of
from bsft_saga.kept.settling import NextAwaiting, adopt, forget, move_on

__all__ = [
    "DUPLICATE",
    "KEPT",
    "KEPT_NOW",
    "OVER_LIMIT",
    "KeptChannel",
    "LostRace",
    "NextAwaiting",
    "adopt",
    "claim",
    "discard",
    "discard_expired",
    "envelope_of",
    "forget",
    "keep",
    "keep_for_key",
    "move_on",
    "next_kept",
    "ready_sagas",
    "release",
    "requeue_dead_lettered",
    "unadopted",
]
