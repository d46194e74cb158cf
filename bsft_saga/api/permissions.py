"""Who may read what: progress metadata needs ``view_sagainstance``; state and payloads
also need ``READ_CONTENT_PERMISSION``."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from bsft_saga.conf import saga_settings

VIEW_PERMISSION = "bsft_saga.view_sagainstance"


class CanViewSagas(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.has_perm(VIEW_PERMISSION))


class CanReadSagaContent(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        permission = saga_settings.api.read_content_permission
        user = request.user
        return bool(permission and user and user.is_authenticated and user.has_perm(permission))
