"""The flow's picture on an instance's admin page: the steps of its flow version as an
inline SVG, marked with where it is, its pending timers, its end and an expired deadline."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.test import Client
from freezegun import freeze_time

from bsft_saga import publish
from bsft_saga.engine.termination import terminate
from bsft_saga.flows.picture import SVG_CLASS
from bsft_saga.flows.registry import flow_registry
from bsft_saga.models import SagaInstance
from bsft_saga.testing import SagaHarness
from tests.support.admin import VIEW_ALL, admin_url, staff_client
from tests.support.timer_fixtures import T0
from tests.testapp.branch_events import OrderAccepted, PaymentAuthorised
from tests.testapp.branch_flows import FulfilmentFlow
from tests.testapp.ops_events import QuoteSent
from tests.testapp.ops_flows import QuoteFollowUpFlow, make_saga

pytestmark = pytest.mark.django_db

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def viewer() -> Client:
    """Staff with the view permissions only: the picture is metadata, not content."""
    return staff_client("viewer", *VIEW_ALL)


def _page(client: Client, saga: SagaInstance) -> str:
    response = client.get(admin_url("sagainstance", "change", saga.pk))
    assert response.status_code == 200
    return response.content.decode()


def _picture(page: str) -> ET.Element:
    """The flow's inline ``<svg>`` on the page (the admin has icons of its own), parsed."""
    start = page.rindex("<svg", 0, page.index(f'class="{SVG_CLASS}"'))
    return ET.fromstring(page[start : page.index("</svg>", start) + len("</svg>")])


def _steps(root: ET.Element) -> dict[int, ET.Element]:
    return {
        int(g.get("data-step", "-1")): g
        for g in root.iter(f"{SVG}g")
        if "step" in g.get("class", "").split()
    }


def _groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if cls in g.get("class", "").split()]


def _text(element: ET.Element) -> str:
    return "\n".join("".join(t.itertext()) for t in element.iter(f"{SVG}text"))


def test_the_instance_page_draws_its_flow_with_the_step_it_waits_at_marked(
    viewer: Client,
) -> None:
    publish(OrderAccepted("o-1"))
    publish(PaymentAuthorised("o-1"))
    saga = SagaInstance.objects.get(saga_type=FulfilmentFlow.saga_type, correlation_key="o-1")

    page = _page(viewer, saga)

    assert "&lt;svg" not in page
    steps = _steps(_picture(page))
    assert len(steps) == len(flow_registry.get(FulfilmentFlow).steps)
    assert {i: g.get("data-status") for i, g in steps.items()} == {
        0: "done",
        1: "done",
        2: "current",
        3: "ahead",
    }


def test_the_picture_lists_the_pending_timers_on_their_wait_and_the_deadline(
    viewer: Client,
) -> None:
    with freeze_time(T0):
        publish(QuoteSent("q-1"))
    saga = SagaInstance.objects.get(saga_type=QuoteFollowUpFlow.saga_type, correlation_key="q-1")

    root = _picture(_page(viewer, saga))

    due = (T0 + timedelta(days=2)).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"timer followup · due {due}" in _text(_steps(root)[1]).splitlines()
    (note,) = _groups(root, "deadline")
    deadline = (T0 + timedelta(days=14)).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert _text(note).splitlines()[-1] == f"deadline at {deadline}"
    # The deadline's own timer is the note, not a timer of the step it began at.
    assert "bsft_saga.deadline" not in _text(root)


def test_the_picture_leaves_timer_names_out_for_staff_who_may_not_see_timers() -> None:
    instances_only = staff_client("instances-only", "view_sagainstance")
    with freeze_time(T0):
        publish(QuoteSent("q-unnamed"))
    saga = SagaInstance.objects.get(
        saga_type=QuoteFollowUpFlow.saga_type, correlation_key="q-unnamed"
    )

    page = _page(instances_only, saga)

    # The step and the due time, not the name (nor the timer list, which needs the same).
    due = (T0 + timedelta(days=2)).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"timer · due {due}" in _text(_steps(_picture(page))[1]).splitlines()
    assert "followup" not in page


def test_the_picture_names_the_timers_for_staff_who_may_see_them() -> None:
    timer_viewer = staff_client("timer-viewer", "view_sagainstance", "view_sagatimeout")
    with freeze_time(T0):
        publish(QuoteSent("q-named"))
    saga = SagaInstance.objects.get(
        saga_type=QuoteFollowUpFlow.saga_type, correlation_key="q-named"
    )

    root = _picture(_page(timer_viewer, saga))

    due = (T0 + timedelta(days=2)).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"timer followup · due {due}" in _text(_steps(root)[1]).splitlines()


def test_a_terminated_instance_is_drawn_terminated_where_it_stopped(viewer: Client) -> None:
    publish(QuoteSent("q-2"))
    saga = SagaInstance.objects.get(saga_type=QuoteFollowUpFlow.saga_type, correlation_key="q-2")
    terminate([saga.pk], reason="customer left")

    root = _picture(_page(viewer, saga))

    assert _steps(root)[1].get("data-status") == "stopped"
    assert _groups(root, "final-terminated")
    assert "timer" not in _text(root)  # terminating canceled them


@pytest.mark.django_db(transaction=True)
def test_an_instance_whose_deadline_expired_says_so(viewer: Client) -> None:
    with SagaHarness(start=T0) as harness:
        harness.publish(QuoteSent("q-3"))
        harness.advance_time(timedelta(days=15))  # the follow-up at 2 days, the deadline at 14
    saga = SagaInstance.objects.get(saga_type=QuoteFollowUpFlow.saga_type, correlation_key="q-3")
    assert saga.is_complete  # expire_quote completes it

    root = _picture(_page(viewer, saga))

    (note,) = _groups(root, "deadline")
    assert "expired" in note.get("class", "").split()
    assert _text(note).endswith("· expired")
    assert _steps(root)[2].get("data-status") == "stopped"
    assert _groups(root, "final-reached")


def test_an_instance_whose_flow_is_not_installed_gets_a_sentence_not_a_failure(
    viewer: Client,
) -> None:
    saga = make_saga("gone-1", saga_type="<script>alert(1)</script>")

    page = _page(viewer, saga)

    assert SVG_CLASS not in page
    assert "<script>alert(1)" not in page
    assert (
        "No installed flow declares &lt;script&gt;alert(1)&lt;/script&gt; version 1, so its "
        "steps cannot be drawn." in page
    )
