"""The read-only saga surface: which instances exist, how far they got, and (audited)
what they hold."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.http import Http404
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SCHEMA_KWARGS, SpectacularAPIView
from rest_framework.decorators import action
from rest_framework.filters import OrderingFilter
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer
from rest_framework.views import APIView
from rest_framework.viewsets import ReadOnlyModelViewSet

from bsft_saga import __version__, clock
from bsft_saga.api.filters import SagaInstanceFilter
from bsft_saga.api.permissions import CanReadSagaContent, CanViewSagas
from bsft_saga.api.serializers import (
    SagaDelayedMessageSerializer,
    SagaInstanceDetailSerializer,
    SagaInstanceSerializer,
    SagaJournalEntrySerializer,
    SagaKeptEventSerializer,
    SagaStatusSerializer,
    SagaTimeoutSerializer,
)
from bsft_saga.audit import READ_CONTENT, AuditRecorder, get_audit_recorder
from bsft_saga.conf import saga_settings
from bsft_saga.db.datetimes import readable_rows
from bsft_saga.history import newest_first
from bsft_saga.listing import delayed_messages, kept_events
from bsft_saga.models import SagaInstance
from bsft_saga.status import saga_status
from bsft_saga.timeouts.listing import in_listing_order, may_see_timers


class SagaPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


# The routes that serve content: audited, and mapped only with READ_CONTENT_PERMISSION.
CONTENT_ACTIONS = frozenset({"retrieve", "timeouts", "kept_events"})

# The serializer of each route that pages rows of another model than instances.
ROW_SERIALIZERS: dict[str, type[BaseSerializer[Any]]] = {
    "timeouts": SagaTimeoutSerializer,
    "kept_events": SagaKeptEventSerializer,
    "delayed_messages": SagaDelayedMessageSerializer,
    "history": SagaJournalEntrySerializer,
}


class SagaInstanceViewSet(ReadOnlyModelViewSet[SagaInstance]):
    """``GET instances/``: progress metadata, newest transition first.
    ``GET instances/<id>/``: state, every pending timer and the newest retired ones,
    audited. ``GET instances/<id>/timeouts/``: all of the instance's timers, paged, audited.
    ``GET instances/<id>/kept-events/``: all its kept events with their payloads, paged,
    audited. ``GET instances/<id>/delayed-messages/``: all its delayed messages still
    waiting, paged; ``GET instances/<id>/history/``: the instance's journal, paged, newest
    first; these two are metadata only, so they need the list's permission and are not
    audited. The content routes are 404 unless ``READ_CONTENT_PERMISSION`` is configured
    (they are then effectively unmapped)."""

    queryset = SagaInstance.objects.all()
    filter_backends = [DjangoFilterBackend, OrderingFilter]
    filterset_class = SagaInstanceFilter
    ordering_fields = ["updated_at", "created_at", "step_index", "saga_type"]
    ordering = ["-updated_at", "-id"]
    pagination_class = SagaPagination
    renderer_classes = [JSONRenderer]
    schema = AutoSchema()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # Before authentication and permissions, so that everyone gets the same 404.
        if self.action in CONTENT_ACTIONS and not saga_settings.api.read_content_permission:
            raise Http404("Reading saga content is not enabled.")
        super().initial(request, *args, **kwargs)

    def get_queryset(self) -> Any:
        # A date stored out of range would fail the whole response; it is served as null
        # and named in the row's "unreadable_fields" instead (bsft_saga.db.datetimes).
        return readable_rows(super().get_queryset())

    def get_permissions(self) -> list[BasePermission]:
        if self.action in CONTENT_ACTIONS:
            return [CanViewSagas(), CanReadSagaContent()]
        return [CanViewSagas()]

    def get_serializer_class(self) -> type[BaseSerializer[Any]]:
        if self.action == "retrieve":
            return SagaInstanceDetailSerializer
        return ROW_SERIALIZERS.get(self.action or "", SagaInstanceSerializer)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        recorder = _content_recorder()
        instance = self.get_object()  # a miss raises 404 here and records nothing
        _record_content_read(recorder, request, instance)
        return Response(self.get_serializer(instance).data)

    # A page of rows, not one instance, for the schema (see ``history``).
    @extend_schema(responses=SagaTimeoutSerializer(many=True), filters=False)
    @action(detail=True, methods=["get"], url_path="timeouts", schema=AutoSchema())
    def timeouts(self, request: Request, pk: str | None = None) -> Response:
        """Every timer of the instance, paged: pending ones first (soonest due first), then
        retired ones, most recently retired first. Audited like the detail."""
        recorder = _content_recorder()
        instance = self.get_object()
        # The viewset is typed for instances; this one route pages timer rows.
        timers: Any = readable_rows(in_listing_order(instance.timeouts.all()))
        page: Any = self.paginate_queryset(timers)
        # After paging: a page that does not exist is DRF's 404 and, like any miss,
        # records nothing.
        _record_content_read(recorder, request, instance)
        return self.get_paginated_response(SagaTimeoutSerializer(page, many=True).data)

    @extend_schema(responses=SagaKeptEventSerializer(many=True), filters=False)
    @action(detail=True, methods=["get"], url_path="kept-events", schema=AutoSchema())
    def kept_events(self, request: Request, pk: str | None = None) -> Response:
        """Every event kept for the instance (``keep_early``), paged, oldest first (the
        order its step applies them in), with their payloads. Audited like the detail,
        each page served."""
        recorder = _content_recorder()
        instance = self.get_object()
        kept: Any = readable_rows(kept_events(instance))  # the viewset is typed for instances
        page: Any = self.paginate_queryset(kept)
        # After paging: a page that does not exist is a 404 and records nothing.
        _record_content_read(recorder, request, instance)
        return self.get_paginated_response(SagaKeptEventSerializer(page, many=True).data)

    @extend_schema(responses=SagaDelayedMessageSerializer(many=True), filters=False)
    @action(detail=True, methods=["get"], url_path="delayed-messages", schema=AutoSchema())
    def delayed_messages(self, request: Request, pk: str | None = None) -> Response:
        """The delayed messages the instance's steps published that still wait for their
        ``deliver_at``, paged, soonest first. Their event types and times, never their
        payloads: the list's permission, not audited."""
        instance = self.get_object()
        waiting: Any = readable_rows(delayed_messages(instance, clock.now()))
        page: Any = self.paginate_queryset(waiting)
        return self.get_paginated_response(SagaDelayedMessageSerializer(page, many=True).data)

    # A page of entries, not one instance: without this the schema would describe one entry
    # (and the instance list's filters, which are not this route's). The action names its
    # schema class so that extend_schema extends it rather than DRF's default, which a
    # project that does not use drf-spectacular leaves at DRF's own.
    @extend_schema(responses=SagaJournalEntrySerializer(many=True), filters=False)
    @action(detail=True, methods=["get"], url_path="history", schema=AutoSchema())
    def history(self, request: Request, pk: str | None = None) -> Response:
        """The instance's journal, paged, newest first: one entry per transition (started,
        advanced, handled, completed, expired) and per operator action on it. Metadata
        only, never state or payload: the list's permission, not audited. ``timer_name``
        is null unless the user may see timers (``bsft_saga.view_sagatimeout``)."""
        instance = self.get_object()  # an unknown or malformed id is a 404, as on the detail
        entries: Any = newest_first(instance.journal.all())  # the viewset is typed for instances
        page: Any = self.paginate_queryset(entries)
        serializer = SagaJournalEntrySerializer(
            page, many=True, context={"timer_names": may_see_timers(request.user)}
        )
        return self.get_paginated_response(serializer.data)


def _content_recorder() -> AuditRecorder:
    recorder = get_audit_recorder()
    if recorder is None:
        raise ImproperlyConfigured(
            "BSFT_SAGA['API']['READ_CONTENT_PERMISSION'] is set but AUDIT_RECORDER is None: "
            "saga content is never served unaudited."
        )
    return recorder


def _record_content_read(recorder: AuditRecorder, request: Request, instance: SagaInstance) -> None:
    recorder.record(
        action=READ_CONTENT,
        user=request.user,
        saga_type=instance.saga_type,
        correlation_key=instance.correlation_key or None,
        instance_id=instance.pk,
    )


class SagaStatusSchema(AutoSchema):
    """The status route's operation is ``saga_status``, not the generated ``status_retrieve``.

    Named here rather than with ``@extend_schema(operation_id=...)``: drf-spectacular refuses
    an ``operation_id`` on a view class (it would name every operation of the view alike),
    and on the method it would extend DRF's default schema class instead of this one.
    """

    def get_operation_id(self) -> str:
        return "saga_status"


# On the class, after ``schema``: drf-spectacular extends the schema class it finds there.
@extend_schema(responses=SagaStatusSerializer)
class SagaStatusView(APIView):
    """``GET status/``: what ``manage.py saga_status --format json`` prints, for users with
    ``bsft_saga.view_sagainstance``; counts only, no content."""

    permission_classes = [CanViewSagas]
    renderer_classes = [JSONRenderer]
    schema = SagaStatusSchema()

    def get(self, request: Request) -> Response:
        return Response(saga_status().as_dict())


class SagaSchemaView(SpectacularAPIView):
    """The OpenAPI document of this surface (generated by drf-spectacular).

    Paths are relative to where the project includes ``bsft_saga.api.urls``; the
    document's ``servers`` entry names that prefix.
    """

    custom_settings = {
        "TITLE": "bsft_saga",
        "DESCRIPTION": "Saga progress and content",
        "VERSION": __version__,
    }

    # The parent's annotation of ``get``, which overriding it drops: without it a project
    # that generates its whole schema gets an error for this view ("unable to guess
    # serializer").
    @extend_schema(**SCHEMA_KWARGS)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().get(request, *args, **kwargs)
        prefix = request.path.rsplit("schema/", 1)[0].rstrip("/") or "/"
        response.data = {**response.data, "servers": [{"url": prefix}]}
        return response
