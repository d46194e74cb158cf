from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    operations = [
        migrations.CreateModel(
            name="Reminder",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("quote_id", models.CharField(max_length=100, verbose_name="quote")),
                (
                    "kind",
                    models.CharField(
                        choices=[("follow-up", "follow-up e-mail"), ("call-back", "call-back")],
                        max_length=20,
                        verbose_name="kind",
                    ),
                ),
                (
                    "message_id",
                    models.UUIDField(
                        help_text="The envelope id of the timer's event.",
                        unique=True,
                        verbose_name="message id",
                    ),
                ),
                ("sent_at", models.DateTimeField(verbose_name="sent at")),
            ],
            options={
                "verbose_name": "reminder",
                "verbose_name_plural": "reminders",
                "ordering": ["sent_at", "id"],
            },
        ),
    ]
