"""One delivery machinery for the two tables of durable hand-offs: timers and the outbox.

A row of either table carries an event that must reach every receiver of the
``event_published`` signal at least once, even across crashes. Both tables go the same way:

1. **claim** (:func:`~bsft_saga.delivery.batch.claim`): a short transaction gives a batch of
   ready rows this pass's token and a lease (``SELECT … FOR UPDATE SKIP LOCKED`` where the
   backend has it, so concurrent passes take disjoint rows);
2. **deliver** (:func:`~bsft_saga.delivery.batch.deliver`): the whole batch in one
   transaction, each row in a savepoint: the row is stamped delivered while the claim is
   still ours (the fence), then its envelope is published; a row whose receivers raise rolls
   back alone and is recorded as a failed attempt, retried after a back-off
   (:mod:`~bsft_saga.delivery.backoff`) and dead-lettered at ``MAX_DISPATCH_ATTEMPTS``;
3. one commit makes the stamps, the steps the events woke and the failure records durable
   together: one WAL flush per batch instead of one per row.

A process killed before that commit loses nothing: the batch rolls back and its rows are
claimed again once the lease has passed. What differs between the tables is a
:class:`~bsft_saga.delivery.channel.Channel`: ``TimerChannel`` (bsft_saga.timeouts) and
``OutboxChannel`` (bsft_saga.outbox).
"""
