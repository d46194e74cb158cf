"""One delivery machinery for the two tables of durable hand-offs: timers and the outbox.

A row of either table carries an event that must reach every receiver of the
``event_published`` signal at least once, even across crashes. Both tables go through the
same pass (:func:`~bsft_saga.delivery.passes.run_pass`):

1. **claim** (:mod:`~bsft_saga.delivery.claim`): a short transaction gives a batch of ready
   rows this pass's token and a lease (``SELECT … FOR UPDATE SKIP LOCKED`` where the backend
   has it, so concurrent passes take disjoint rows);
2. **run** each row's receivers with no transaction open; the steps they wake stage their
   windows with the pass (:mod:`~bsft_saga.delivery.staging`);
3. **commit** in groups (:mod:`~bsft_saga.delivery.commit`): the windows and the rows'
   stamps in one transaction, in one lock order (each row on its own: a row that must be
   undone sends the group back to a savepoint per row), at least every 100 ms; a row whose
   receivers raised records a failed attempt instead, retried after a back-off
   (:mod:`~bsft_saga.delivery.backoff`) and dead-lettered at ``MAX_DISPATCH_ATTEMPTS``.

A process killed at any moment loses nothing: what it had not committed is claimed again
once the lease has passed, and only the receivers of its last commit group run twice. What
differs between the tables is a :class:`~bsft_saga.delivery.channel.Channel`:
``TimerChannel`` (bsft_saga.timeouts) and ``OutboxChannel`` (bsft_saga.outbox).
"""
