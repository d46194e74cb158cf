"""Database helpers of the core: the hot path's fixed-shape SQL (:mod:`~bsft_saga.db.sql`),
the datetimes bsft_saga stores and reads back (:mod:`~bsft_saga.db.datetimes`), connection
hygiene outside requests (:mod:`~bsft_saga.db.connections`), and the checks of rows a deploy
left behind (:mod:`~bsft_saga.db.stored_rows`)."""
