"""Template tags of bsft_saga's admin templates (``{% load bsft_saga_admin %}``)."""

from __future__ import annotations

from typing import Any

from django import template

from bsft_saga.status import SagaStatus, saga_status

register = template.Library()

VIEW_PERMISSION = "bsft_saga.view_sagainstance"


@register.simple_tag(takes_context=True)
def saga_status_at_a_glance(context: template.Context) -> SagaStatus | None:
    """``saga_status()`` for a user who may view sagas; ``None`` for anybody else."""
    request: Any = getattr(context, "request", None)
    if request is None or not request.user.has_perm(VIEW_PERMISSION):
        return None
    return saga_status()
