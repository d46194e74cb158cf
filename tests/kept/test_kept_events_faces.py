"""Kept events where operators look: the instance's admin page (an inline, payloads only to
content readers, audited) and the API's instance detail (audited content)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings
from django.urls import reverse

from bsft_saga import publish
from bsft_saga.audit import READ_CONTENT
from bsft_saga.models import SagaInstance
from tests.api.test_api import READ, RECORDED, VIEW, client_for, detail, make_user
from tests.support.admin import CONTENT, VIEW_ALL, staff_client
from tests.testapp.branch_events import OrderAccepted, ParcelPacked
from tests.testapp.branch_flows import FulfilmentFlow

pytestmark = pytest.mark.django_db(transaction=True)

PARCEL = "parcel-with-a-secret-label"
RECORDER = {
    "API": {"READ_CONTENT_PERMISSION": READ, "AUDIT_RECORDER": "tests.api.test_api.ListRecorder"}
}


def kept_saga() -> SagaInstance:
    publish(OrderAccepted("o-1"))
    publish(ParcelPacked("o-1", parcel=PARCEL))
    return SagaInstance.objects.get(saga_type=FulfilmentFlow.saga_type)


def change_url(saga: SagaInstance) -> str:
    return reverse("admin:bsft_saga_sagainstance_change", args=[saga.pk])


def test_the_instance_page_lists_kept_events_and_their_payload_to_content_readers() -> None:
    saga = kept_saga()
    RECORDED.clear()
    with override_settings(BSFT_SAGA=RECORDER):
        page = staff_client("reader", *VIEW_ALL, CONTENT).get(change_url(saga)).content.decode()

    assert "tests.branch.parcel-packed" in page
    assert PARCEL in page
    assert [r["action"] for r in RECORDED] == [READ_CONTENT]


def test_the_instance_page_hides_kept_payloads_from_other_operators() -> None:
    saga = kept_saga()
    page = staff_client("viewer", *VIEW_ALL).get(change_url(saga)).content.decode()

    assert "tests.branch.parcel-packed" in page
    assert PARCEL not in page


def test_the_api_detail_lists_kept_events_with_their_payload_audited() -> None:
    saga = kept_saga()
    RECORDED.clear()
    with override_settings(BSFT_SAGA=RECORDER):
        body: dict[str, Any] = client_for(make_user(VIEW, READ)).get(detail(saga.pk)).json()

    [kept] = body["kept_events"]
    assert (kept["event_type"], kept["step_index"]) == ("tests.branch.parcel-packed", 2)
    assert kept["payload"]["parcel"] == PARCEL
    assert [r["action"] for r in RECORDED] == [READ_CONTENT]
    RECORDED.clear()
