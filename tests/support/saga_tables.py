"""bsft_saga's tables emptied and analysed between runs that write a backlog of their own
(``make bench`` and the contention tests), on PostgreSQL, MariaDB and SQLite."""

from __future__ import annotations


def saga_tables() -> list[str]:
    """Every table of bsft_saga's models, the instances' last (the others point at them)."""
    from django.apps import apps

    from bsft_saga.models import SagaInstance

    models = apps.get_app_config("bsft_saga").get_models()
    return [m._meta.db_table for m in models if m is not SagaInstance] + [
        SagaInstance._meta.db_table
    ]


def reset_saga_tables() -> None:
    """Empty the saga tables, so that every run starts from the same table.

    On PostgreSQL ``TRUNCATE … RESTART IDENTITY`` rather than ``DELETE``: no dead rows or
    index entries are left for the next run to step over, and autovacuum has nothing to do
    in the middle of one. On MariaDB ``TRUNCATE`` too, for the same reason (no deleted rows
    left for InnoDB's purge to clean up during the next run), with the foreign key checks
    off for it, which MariaDB wants even when the tables go children first. (SQLite, the
    step benchmark's second backend, has ``DELETE``.)
    """
    from django.db import connection

    tables = [connection.ops.quote_name(table) for table in saga_tables()]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY")
        elif connection.vendor == "mysql":
            cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
            try:
                for table in tables:
                    cursor.execute(f"TRUNCATE TABLE {table}")
            finally:
                cursor.execute("SET FOREIGN_KEY_CHECKS = 1")
        else:
            for table in tables:  # children first
                cursor.execute(f"DELETE FROM {table}")


def vacuum_analyze() -> None:
    """Fresh statistics and visibility map for the rows just written (outside any timing).

    Without it the planner would see each run's bulk-written rows only once autovacuum got
    round to them, which it does at a different moment in each run. On MariaDB, which has
    no VACUUM, ``ANALYZE TABLE`` (InnoDB's statistics would otherwise be updated once a
    tenth of a table changed, at a moment of InnoDB's choosing).
    """
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            tables = ", ".join(connection.ops.quote_name(table) for table in saga_tables())
            cursor.execute(f"ANALYZE TABLE {tables}")
            cursor.fetchall()  # one status row per table, read before the next statement
            return
        for table in saga_tables():
            cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(table)}")
