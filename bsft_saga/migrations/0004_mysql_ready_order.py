"""MariaDB and MySQL only: the claim's ready order, as a stored column and an index over it.

On PostgreSQL and SQLite a pass claims down a partial index on an expression: the pending
rows in the order they become ready (``COALESCE(next_attempt_at, due_at)`` for timers,
``COALESCE(next_attempt_at, deliver_at, created_at)`` for outbox rows, ``next_attempt_at``
for kept events), then ``id``. Django creates no partial index on MariaDB or MySQL, and no
index on an expression on MariaDB: InnoDB then reads and locks every ready row to sort them
before the claim's ``LIMIT``, and a second dispatcher's ``SKIP LOCKED`` finds nothing.

Each of the three tables gets a stored generated column ``ready_at``, the row's ready time
while it is pending and NULL once it is retired (the expression the ordering uses, the
partial index's condition), and an index over ``(ready_at, id)``. The claim reads that
index in its order (``bsft_saga.querysets``), so it locks only the rows it takes, and
concurrent claims take disjoint batches side by side.

On every other database the migration does nothing.
"""

from django.db import migrations

# (model, index name, when the row is pending, its ready time)
READY_ORDER = (
    (
        "sagatimeout",
        "bsft_saga_timeout_ready_at_idx",
        "`dispatched_at` IS NULL",
        "COALESCE(`next_attempt_at`, `due_at`)",
    ),
    (
        "sagaoutboxmessage",
        "bsft_saga_outbox_ready_at_idx",
        "`delivered_at` IS NULL AND `dead_lettered_at` IS NULL",
        "COALESCE(`next_attempt_at`, `deliver_at`, `created_at`)",
    ),
    (
        "sagakeptevent",
        "bsft_saga_kept_ready_at_idx",
        "`dead_lettered_at` IS NULL",
        "`next_attempt_at`",
    ),
)

#: The generated column each table holds its ready time in.
COLUMN = "ready_at"


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    quote = schema_editor.quote_name
    for model_name, index, pending, ready_at in READY_ORDER:
        table = quote(apps.get_model("bsft_saga", model_name)._meta.db_table)
        # The column and its index in one statement: InnoDB rebuilds the table once.
        schema_editor.execute(
            f"ALTER TABLE {table} "
            f"ADD COLUMN {quote(COLUMN)} datetime(6) AS (IF({pending}, {ready_at}, NULL)) STORED, "
            f"ADD INDEX {quote(index)} ({quote(COLUMN)}, {quote('id')})"
        )


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    quote = schema_editor.quote_name
    for model_name, index, _pending, _ready_at in READY_ORDER:
        table = quote(apps.get_model("bsft_saga", model_name)._meta.db_table)
        schema_editor.execute(
            f"ALTER TABLE {table} DROP INDEX {quote(index)}, DROP COLUMN {quote(COLUMN)}"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("bsft_saga", "0003_mysql_uniqueness"),
    ]

    operations = [
        # DDL: MariaDB and MySQL commit each statement, so no transaction around it.
        migrations.RunPython(forwards, backwards, atomic=False, elidable=False),
    ]
