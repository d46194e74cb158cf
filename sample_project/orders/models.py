"""The sample shop's one table: the reminders its receivers "sent"."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Reminder(models.Model):
    """A follow-up e-mail or call-back task, recorded once per timer event.

    A timer's event reaches plain receivers at least once; ``message_id`` (the event's
    envelope id, stable across redeliveries) makes sending idempotent.
    """

    class Kind(models.TextChoices):
        FOLLOW_UP = "follow-up", _("follow-up e-mail")
        CALL_BACK = "call-back", _("call-back")

    quote_id = models.CharField(_("quote"), max_length=200)
    kind = models.CharField(_("kind"), max_length=20, choices=Kind.choices)
    message_id = models.UUIDField(
        _("message id"), unique=True, help_text=_("The envelope id of the timer's event.")
    )
    sent_at = models.DateTimeField(_("sent at"))

    # Declared, not implied: the type checker's settings (tests.settings) do not install
    # this app, so django-stubs would not add the default manager.
    objects: models.Manager[Reminder] = models.Manager()

    class Meta:
        verbose_name = _("reminder")
        verbose_name_plural = _("reminders")
        ordering = ["sent_at", "id"]

    def __str__(self) -> str:
        return f"{self.Kind(self.kind).label} for {self.quote_id}"
