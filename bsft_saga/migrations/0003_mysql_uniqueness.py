"""MariaDB and MySQL only: the conditional unique constraints, and byte-wise text columns.

Django creates no unique constraint with a condition on MariaDB or MySQL. Each of bsft_saga's
three is created there as a stored generated column, 1 while the row is in the set the
condition names and NULL otherwise, and a unique index under the constraint's name over the
flag and the constraint's columns: a unique index never compares NULLs, so it holds among
the rows of the set alone, as the partial index does on PostgreSQL.

The text columns get the binary collation without padding, so that keys and names compare
as written (as on PostgreSQL), whatever the database's default collation: under it
``"A-1"``, ``"a-1"`` and ``"a-1 "`` could be one key, and a second active instance of a
different key would be refused.

On every other database the migration does nothing.
"""

from django.db import migrations, models

# (model, constraint and index name, flag column, when the flag is 1, key columns)
GENERATED_UNIQUE = (
    (
        "sagainstance",
        "bsft_saga_one_active_instance_per_key",
        "active_flag",
        "NOT `is_complete`",
        ("saga_type", "correlation_key"),
    ),
    (
        "sagatimeout",
        "bsft_saga_one_pending_timeout_name",
        "pending_flag",
        "`dispatched_at` IS NULL",
        ("saga_id", "name"),
    ),
    (
        "sagakeptevent",
        "bsft_saga_kept_once_per_key",
        "unowned_flag",
        "`saga_id` IS NULL",
        ("saga_type", "correlation_key", "message_id"),
    ),
)


def _binary_collation(connection):
    # MariaDB's and MySQL 8's binary collations that do not ignore trailing spaces.
    return "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"


def _text_columns(apps, schema_editor, collation):
    """ALTER TABLE ... MODIFY every CharField of bsft_saga's tables to ``collation``
    (``None``: back to the table's default)."""
    quote = schema_editor.quote_name
    for model in apps.get_app_config("bsft_saga").get_models():
        changes, params = [], []
        for field in model._meta.local_fields:
            if not isinstance(field, models.CharField):
                continue
            changed = field.clone()
            changed.set_attributes_from_name(field.name)
            changed.model = model
            changed.db_collation = collation
            definition, values = schema_editor.column_sql(model, changed, include_default=False)
            changes.append(f"MODIFY {quote(field.column)} {definition}")
            params.extend(values or ())
        if changes:
            schema_editor.execute(
                f"ALTER TABLE {quote(model._meta.db_table)} {', '.join(changes)}", params or None
            )


def forwards(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "mysql":
        return
    _text_columns(apps, schema_editor, _binary_collation(connection))
    quote = schema_editor.quote_name
    for model_name, name, flag, condition, columns in GENERATED_UNIQUE:
        table = quote(apps.get_model("bsft_saga", model_name)._meta.db_table)
        schema_editor.execute(
            f"ALTER TABLE {table} ADD COLUMN {quote(flag)} tinyint "
            f"AS (IF({condition}, 1, NULL)) STORED"
        )
        # The flag first: an index led by saga_id would stand in for the foreign key's own
        # index, which InnoDB then drops, and the index could never be dropped again.
        indexed = ", ".join(quote(column) for column in (flag, *columns))
        schema_editor.execute(f"CREATE UNIQUE INDEX {quote(name)} ON {table} ({indexed})")


def backwards(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "mysql":
        return
    quote = schema_editor.quote_name
    for model_name, name, flag, _condition, _columns in GENERATED_UNIQUE:
        table = quote(apps.get_model("bsft_saga", model_name)._meta.db_table)
        schema_editor.execute(f"DROP INDEX {quote(name)} ON {table}")
        schema_editor.execute(f"ALTER TABLE {table} DROP COLUMN {quote(flag)}")
    _text_columns(apps, schema_editor, None)


class Migration(migrations.Migration):
    dependencies = [
        ("bsft_saga", "0002_trace_context"),
    ]

    operations = [
        # DDL: MariaDB and MySQL commit each statement, so no transaction around it.
        migrations.RunPython(forwards, backwards, atomic=False, elidable=False),
    ]
