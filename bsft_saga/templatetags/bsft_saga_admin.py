"""Template tags of bsft_saga's admin templates (``{% load bsft_saga_admin %}``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils.safestring import SafeString

from bsft_saga.admin.times import moment_html
from bsft_saga.status import SagaStatus, saga_status

register = template.Library()

VIEW_PERMISSION = "bsft_saga.view_sagainstance"


@register.filter
def moment(value: datetime | str | None) -> SafeString:
    """``{{ value|moment }}``: a moment as every bsft_saga admin page shows it, to the
    second in the current time zone, naming the zone (``bsft_saga.admin.times``)."""
    return moment_html(value)


@register.simple_tag(takes_context=True)
def saga_status_at_a_glance(context: template.Context) -> SagaStatus | None:
    """``saga_status()`` for a user who may view sagas; ``None`` for anybody else."""
    request: Any = getattr(context, "request", None)
    if request is None or not request.user.has_perm(VIEW_PERMISSION):
        return None
    return saga_status()
