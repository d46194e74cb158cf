"""An instance's timers over HTTP: the detail caps them, ``instances/<id>/timeouts/`` pages all.

A saga with a recurring timer keeps a retired row per occurrence; the detail lists every
pending timer and the 50 newest retired ones, and says how many there are in all.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import override_settings
from django.urls import reverse
from rest_framework.test import APIClient

from bsft_saga.api.serializers import TIMER_FIELDS
from bsft_saga.audit import READ_CONTENT
from bsft_saga.models import SagaAuditRecord, SagaInstance, SagaTimeout
from bsft_saga.timeouts.listing import RETIRED_TIMERS_LISTED
from tests.testapp.ops_flows import make_saga, make_timer

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
VIEW = "view_sagainstance"
READ = "read_saga_content"


def client_with(*codenames: str) -> APIClient:
    user = User.objects.create_user(f"user-{uuid.uuid4().hex[:8]}")
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="bsft_saga", codename__in=codenames)
    )
    client = APIClient()
    client.force_login(user)
    return client


def detail(saga: SagaInstance) -> str:
    return reverse("bsft_saga:instance-detail", kwargs={"pk": saga.pk})


def timers_url(saga: SagaInstance | str) -> str:
    pk = saga if isinstance(saga, str) else saga.pk
    return reverse("bsft_saga:instance-timeouts", kwargs={"pk": pk})


def retire_many(saga: SagaInstance, count: int) -> list[int]:
    """``count`` fired occurrences of a recurring timer, the i-th retired at T0 + i minutes."""
    rows = SagaTimeout.objects.bulk_create(
        [
            SagaTimeout(
                saga=saga,
                name="tick",
                due_at=T0 + timedelta(minutes=number),
                event_type="tests.ops.reminder-due",
                payload={"n": number},
                scheduled_step_index=1,
                scheduled_at=T0,
                dispatched_at=T0 + timedelta(minutes=number),
                outcome="fired",
            )
            for number in range(count)
        ]
    )
    return [row.pk for row in rows]


@pytest.fixture
def reader() -> APIClient:
    return client_with(VIEW, READ)


@pytest.fixture
def busy_saga() -> dict[str, Any]:
    """Two pending timers and 60 retired ones (more than the detail lists)."""
    saga = make_saga("busy")
    later = make_timer(saga, "later", due_at=T0 + timedelta(days=2))
    sooner = make_timer(saga, "sooner", due_at=T0 + timedelta(days=1))
    retired = retire_many(saga, RETIRED_TIMERS_LISTED + 10)
    return {"saga": saga, "pending": [sooner.pk, later.pk], "retired": retired}


# --- the detail -------------------------------------------------------------------------


def test_the_detail_lists_every_pending_timer_and_the_50_newest_retired(
    reader: APIClient, busy_saga: dict[str, Any]
) -> None:
    body = reader.get(detail(busy_saga["saga"])).json()

    newest_first = list(reversed(busy_saga["retired"]))
    assert [row["id"] for row in body["timeouts"]] == [
        *busy_saga["pending"],
        *newest_first[:RETIRED_TIMERS_LISTED],
    ]
    assert body["timeouts_total"] == 2 + RETIRED_TIMERS_LISTED + 10


def test_the_detail_of_a_small_instance_lists_all_its_timers(reader: APIClient) -> None:
    saga = make_saga("small")
    make_timer(saga, "pending")
    make_timer(saga, "gone", outcome="canceled")

    body = reader.get(detail(saga)).json()

    assert [row["name"] for row in body["timeouts"]] == ["pending", "gone"]
    assert body["timeouts_total"] == 2


def test_the_detail_lists_pending_timers_beyond_the_cap(reader: APIClient) -> None:
    saga = make_saga("many-pending")
    for number in range(RETIRED_TIMERS_LISTED + 5):
        make_timer(saga, f"t-{number}")
    retire_many(saga, 3)

    body = reader.get(detail(saga)).json()

    assert len(body["timeouts"]) == RETIRED_TIMERS_LISTED + 5 + 3


# --- the timer sub-route ----------------------------------------------------------------


def test_the_timer_route_pages_through_all_timers_pending_first_then_newest_retired(
    reader: APIClient, busy_saga: dict[str, Any]
) -> None:
    url = timers_url(busy_saga["saga"])
    first = reader.get(url, {"page_size": 50}).json()
    second = reader.get(first["next"]).json()

    assert first["count"] == 62
    listed = [row["id"] for row in first["results"] + second["results"]]
    assert listed == [*busy_saga["pending"], *reversed(busy_saga["retired"])]
    assert second["next"] is None
    assert set(first["results"][0]) == set(TIMER_FIELDS)


def test_each_page_of_the_timer_route_is_audited(
    reader: APIClient, busy_saga: dict[str, Any]
) -> None:
    url = timers_url(busy_saga["saga"])
    reader.get(url)
    reader.get(url, {"page": 2})

    records = list(SagaAuditRecord.objects.all())
    assert len(records) == 2
    assert {(r.action, r.instance_id, r.correlation_key) for r in records} == {
        (READ_CONTENT, busy_saga["saga"].pk, "busy")
    }


def test_a_page_past_the_end_is_404_and_not_audited(
    reader: APIClient, busy_saga: dict[str, Any]
) -> None:
    response = reader.get(timers_url(busy_saga["saga"]), {"page": 99})

    assert response.status_code == 404
    assert not SagaAuditRecord.objects.exists()


def test_the_timer_route_of_an_unknown_instance_is_404_and_not_audited(reader: APIClient) -> None:
    assert reader.get(timers_url(str(uuid.uuid4()))).status_code == 404
    assert reader.get(timers_url("not-a-uuid")).status_code == 404
    assert not SagaAuditRecord.objects.exists()


@pytest.mark.parametrize(
    "codenames", [(), (VIEW,), (READ,)], ids=["nothing", "view-only", "content-only"]
)
def test_the_timer_route_needs_both_permissions_like_the_detail(
    busy_saga: dict[str, Any], codenames: tuple[str, ...]
) -> None:
    response = client_with(*codenames).get(timers_url(busy_saga["saga"]))

    assert response.status_code == 403
    assert not SagaAuditRecord.objects.exists()


def test_the_timer_route_is_refused_to_anonymous_requests(busy_saga: dict[str, Any]) -> None:
    assert APIClient().get(timers_url(busy_saga["saga"])).status_code in (401, 403)


def test_without_a_content_permission_the_timer_route_is_unmapped(
    reader: APIClient, busy_saga: dict[str, Any]
) -> None:
    with override_settings(BSFT_SAGA={"API": {"READ_CONTENT_PERMISSION": None}}):
        response = reader.get(timers_url(busy_saga["saga"]))

    assert response.status_code == 404
    assert not SagaAuditRecord.objects.exists()


def test_the_schema_documents_the_timer_route_and_the_total(reader: APIClient) -> None:
    schema = reader.get(reverse("bsft_saga:schema"), {"format": "json"}).json()

    assert "/instances/{id}/timeouts/" in schema["paths"]
    detail_schema = schema["components"]["schemas"]["SagaInstanceDetail"]["properties"]
    assert detail_schema["timeouts_total"]["type"] == "integer"
    assert detail_schema["timeouts"]["type"] == "array"
