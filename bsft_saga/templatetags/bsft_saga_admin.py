"""Template tags of bsft_saga's admin templates (``{% load bsft_saga_admin %}``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from bsft_saga.admin.times import format_duration, moment_html
from bsft_saga.dispatchers import DispatcherStatus
from bsft_saga.status import SagaStatus, saga_status

register = template.Library()

VIEW_PERMISSION = "bsft_saga.view_sagainstance"


@register.filter
def moment(value: datetime | str | None) -> SafeString:
    """``{{ value|moment }}``: a moment as every bsft_saga admin page shows it, to the
    second in the current time zone, naming the zone (``bsft_saga.admin.times``)."""
    return moment_html(value)


@register.filter
def duration(seconds: float | None, decimals: int = 0) -> str:
    """``{{ seconds|duration }}``: a length of time as people read it ("42 s", "3 h 0 min";
    ``|duration:1`` writes one decimal under a minute); empty for ``None``."""
    if seconds is None:
        return ""
    return format_duration(seconds, decimals)


@register.filter
def ago(seconds: float | None) -> str:
    """``{{ seconds|ago }}``: "42 s ago", "3 h 0 min ago"; empty for ``None``."""
    if seconds is None:
        return ""
    return _("%(duration)s ago") % {"duration": format_duration(seconds)}


@register.simple_tag
def dispatcher_report(dispatcher: DispatcherStatus) -> SafeString:
    """What a dispatcher's last report says: its moment, the rows it delivered, and the
    claims it held. A stale dispatcher's claims are told as of that report: its leases
    have run out since, or will, and other dispatchers may hold those rows by now."""
    delivered = ngettext(
        "%(count)d row delivered", "%(count)d rows delivered", dispatcher.delivered
    ) % {"count": dispatcher.delivered}
    if dispatcher.stale:
        claims = ngettext(
            "held %(count)d claim at its last pass",
            "held %(count)d claims at its last pass",
            dispatcher.claims,
        )
    else:
        claims = ngettext("%(count)d claim held", "%(count)d claims held", dispatcher.claims)
    return format_html(
        _("last pass {at}; {delivered}, {claims}"),
        at=moment_html(dispatcher.last_pass_at),
        delivered=delivered,
        claims=claims % {"count": dispatcher.claims},
    )


@register.simple_tag(takes_context=True)
def saga_status_at_a_glance(context: template.Context) -> SagaStatus | None:
    """``saga_status()`` for a user who may view sagas; ``None`` for anybody else."""
    request: Any = getattr(context, "request", None)
    if request is None or not request.user.has_perm(VIEW_PERMISSION):
        return None
    return saga_status()
