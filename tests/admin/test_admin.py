"""The read-only operational admin and its ``requeue_dead_lettered`` action."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils.html import strip_tags

from bsft_saga import clock, publish
from bsft_saga.models import SagaAuditRecord, SagaInstance, SagaOutboxMessage, SagaTimeout
from tests.testapp.engine_events import Unrouted
from tests.testapp.ops_flows import make_saga, make_timer

pytestmark = pytest.mark.django_db

MODELS = ("sagainstance", "sagatimeout", "sagaoutboxmessage", "sagaauditrecord")
SECRET = "customer-4711@example.com"


def _url(model: str, view: str, *args: Any) -> str:
    return reverse(f"admin:bsft_saga_{model}_{view}", args=args)


def _user(username: str, *codenames: str, superuser: bool = False) -> Client:
    if superuser:
        user = User.objects.create_superuser(username, f"{username}@example.com")
    else:
        user = User.objects.create_user(username, is_staff=True)
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="bsft_saga", codename__in=codenames)
        )
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin_client_() -> Client:
    return _user("root", superuser=True)


@pytest.fixture
def viewer() -> Client:
    """Staff with the four view permissions and nothing else."""
    return _user("viewer", *(f"view_{model}" for model in MODELS))


@pytest.fixture
def operator() -> Client:
    """Staff who may view timers and requeue them (change permission), no content access."""
    return _user("operator", "view_sagatimeout", "change_sagatimeout")


@pytest.fixture
def rows() -> dict[str, Any]:
    saga = make_saga("admin-1")
    dead = make_timer(saga, "dead", outcome="dead_lettered", reason=f"ValueError: {SECRET}")
    pending = make_timer(saga, "pending")
    fired = make_timer(saga, "fired", outcome="fired")
    return {"saga": saga, "dead": dead, "pending": pending, "fired": fired}


def _messages(response: Any) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in get_messages(response.wsgi_request)]


def _run_action(client: Client, *ids: int) -> Any:
    return client.post(
        _url("sagatimeout", "changelist"),
        {"action": "requeue_dead_lettered", "_selected_action": [str(pk) for pk in ids]},
    )


# -- read-only pages ----------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_changelists_render_for_a_superuser(
    admin_client_: Client, rows: dict[str, Any], model: str
) -> None:
    assert admin_client_.get(_url(model, "changelist")).status_code == 200


@pytest.mark.parametrize("model", MODELS)
def test_changelists_render_for_staff_with_view_permission_only(
    viewer: Client, rows: dict[str, Any], model: str
) -> None:
    assert viewer.get(_url(model, "changelist")).status_code == 200


def test_staff_without_view_permission_is_refused(rows: dict[str, Any]) -> None:
    outsider = _user("outsider")
    assert outsider.get(_url("sagatimeout", "changelist")).status_code == 403


@pytest.mark.parametrize("model", MODELS)
def test_nobody_can_add_rows(admin_client_: Client, model: str) -> None:
    assert admin_client_.get(_url(model, "add")).status_code == 403


def test_detail_pages_are_read_only_even_for_a_superuser(
    admin_client_: Client, rows: dict[str, Any]
) -> None:
    url = _url("sagatimeout", "change", rows["pending"].pk)

    page = admin_client_.get(url)
    assert page.status_code == 200
    assert page.context["has_change_permission"] is False
    assert b'name="_save"' not in page.content

    assert admin_client_.post(url, {"name": "renamed"}).status_code == 403
    assert SagaTimeout.objects.get(pk=rows["pending"].pk).name == "pending"


def test_nobody_can_delete_rows(admin_client_: Client, rows: dict[str, Any]) -> None:
    url = _url("sagainstance", "delete", rows["saga"].pk)
    assert admin_client_.post(url, {"post": "yes"}).status_code == 403
    assert SagaInstance.objects.filter(pk=rows["saga"].pk).exists()


def test_the_instance_page_lists_its_timers_inline(viewer: Client, rows: dict[str, Any]) -> None:
    page = viewer.get(_url("sagainstance", "change", rows["saga"].pk))

    assert page.status_code == 200
    [inline] = page.context["inline_admin_formsets"]
    assert {form.original.name for form in inline} == {"dead", "pending", "fired"}
    assert not inline.has_add_permission
    assert not inline.has_change_permission


# -- filters and search -------------------------------------------------------------------------


def _listed(client: Client, model: str, query: str) -> set[Any]:
    page = client.get(_url(model, "changelist") + query)
    assert page.status_code == 200
    return set(page.context["cl"].result_list)


def test_timeouts_filter_by_delivery_status(viewer: Client, rows: dict[str, Any]) -> None:
    later = make_timer(rows["saga"], "later", due_at=clock.now() + timedelta(days=1))

    assert _listed(viewer, "sagatimeout", "?status=dead_lettered") == {rows["dead"]}
    assert _listed(viewer, "sagatimeout", "?status=ready") == {rows["pending"]}
    assert _listed(viewer, "sagatimeout", "?status=waiting") == {later}
    assert _listed(viewer, "sagatimeout", "?status=fired") == {rows["fired"]}


def test_timeouts_search_by_correlation_key_and_name(viewer: Client, rows: dict[str, Any]) -> None:
    make_timer(make_saga("someone-else"), "dead", outcome="dead_lettered")

    assert len(_listed(viewer, "sagatimeout", "?q=admin-1")) == 3
    assert len(_listed(viewer, "sagatimeout", "?q=dead")) == 2


def test_the_timer_list_names_a_completed_saga_complete_not_by_a_step_it_never_waits_at(
    viewer: Client,
) -> None:
    done = make_saga("done", complete=True)
    SagaInstance.objects.filter(pk=done.pk).update(step_index=2)
    stopped = make_saga("stopped", complete=True)
    SagaInstance.objects.filter(pk=stopped.pk).update(terminated_reason="duplicate order")
    make_timer(done, "followup", outcome="canceled")
    make_timer(stopped, "escalate", outcome="canceled")
    make_timer(make_saga("waiting"), "remind")

    page = strip_tags(viewer.get(_url("sagatimeout", "changelist")).content.decode())

    assert f"{done.saga_type}[done] complete" in page
    assert f"{done.saga_type}[stopped] terminated at step 1" in page
    assert f"{done.saga_type}[waiting] step 1" in page
    assert "[done] step" not in page


def test_instances_filter_by_stalled(viewer: Client, rows: dict[str, Any]) -> None:
    from datetime import timedelta

    from bsft_saga import clock

    old = make_saga("old", now=clock.now() - timedelta(days=2))
    make_saga("finished", complete=True, now=clock.now() - timedelta(days=2))

    assert _listed(viewer, "sagainstance", "?stalled=1d") == {old}
    assert _listed(viewer, "sagainstance", "?is_complete__exact=0") == {old, rows["saga"]}


def test_instances_filter_by_flow_version_and_their_page_shows_it(
    viewer: Client, rows: dict[str, Any]
) -> None:
    on_v2 = make_saga("on-v2")
    SagaInstance.objects.filter(pk=on_v2.pk).update(flow_version=2)

    assert _listed(viewer, "sagainstance", "?flow_version__exact=2") == {on_v2}
    page = viewer.get(_url("sagainstance", "change", on_v2.pk))
    assert b"Flow version" in page.content


# -- content and audit --------------------------------------------------------------------------


def test_errors_and_payloads_are_hidden_without_the_content_permission(
    viewer: Client, rows: dict[str, Any]
) -> None:
    page = viewer.get(_url("sagatimeout", "change", rows["dead"].pk))

    assert page.status_code == 200
    assert SECRET.encode() not in page.content
    assert b"admin-1" in page.content  # the saga link is metadata, not content
    assert not SagaAuditRecord.objects.exists()


def test_a_content_reader_sees_the_reason_and_the_view_is_audited(
    admin_client_: Client, rows: dict[str, Any]
) -> None:
    page = admin_client_.get(_url("sagatimeout", "change", rows["dead"].pk))

    assert SECRET.encode() in page.content
    [record] = SagaAuditRecord.objects.all()
    assert (record.username, record.saga_type, record.instance_id) == (
        "root",
        rows["saga"].saga_type,
        rows["saga"].pk,
    )


def test_a_content_reader_sees_the_state_of_an_instance(
    admin_client_: Client, rows: dict[str, Any]
) -> None:
    page = admin_client_.get(_url("sagainstance", "change", rows["saga"].pk))

    assert b"&quot;reminded&quot;: false" in page.content
    assert SagaAuditRecord.objects.count() == 1


# -- the requeue action -------------------------------------------------------------------------


def test_the_requeue_action_requeues_and_reports(
    admin_client_: Client, rows: dict[str, Any]
) -> None:
    response = _run_action(admin_client_, rows["dead"].pk)

    assert response.status_code == 302
    assert _messages(response) == [
        ("success", "1 dead-lettered timer was requeued; it fires at the next drain.")
    ]
    dead = SagaTimeout.objects.get(pk=rows["dead"].pk)
    assert (dead.dispatched_at, dead.outcome, dead.attempts) == (None, None, 0)


def test_the_requeue_action_reports_each_refusal_and_why(
    admin_client_: Client, rows: dict[str, Any]
) -> None:
    twin_saga = make_saga("admin-twin")
    blocked = make_timer(twin_saga, "remind", outcome="dead_lettered")
    holder = make_timer(twin_saga, "remind")

    response = _run_action(admin_client_, rows["dead"].pk, rows["fired"].pk, blocked.pk)

    messages = _messages(response)
    assert messages[0] == (
        "success",
        "1 dead-lettered timer was requeued; it fires at the next drain.",
    )
    assert messages[1] == ("warning", "2 timers were not requeued:")
    reasons = [text for level, text in messages[2:] if level == "warning"]
    assert len(reasons) == 2
    assert any("'fired'" in r and "is not dead-lettered" in r for r in reasons)
    assert any(f"pending timer 'remind' (id {holder.pk})" in r for r in reasons)
    assert SagaTimeout.objects.get(pk=blocked.pk).outcome == "dead_lettered"


def test_the_requeue_action_is_offered_only_with_the_change_permission(
    viewer: Client, operator: Client, rows: dict[str, Any]
) -> None:
    def offered(client: Client) -> bool:
        page = client.get(_url("sagatimeout", "changelist"))
        form = page.context["action_form"]
        return form is not None and "requeue_dead_lettered" in dict(form.fields["action"].choices)

    assert not offered(viewer)
    assert offered(operator)


def test_view_only_staff_cannot_run_the_requeue_action(
    viewer: Client, rows: dict[str, Any]
) -> None:
    _run_action(viewer, rows["dead"].pk)

    assert SagaTimeout.objects.get(pk=rows["dead"].pk).outcome == "dead_lettered"


def test_an_operator_with_the_change_permission_can_requeue(
    operator: Client, rows: dict[str, Any]
) -> None:
    response = _run_action(operator, rows["dead"].pk)

    assert response.status_code == 302
    assert SagaTimeout.objects.get(pk=rows["dead"].pk).dispatched_at is None


def test_many_refusals_are_summarised(admin_client_: Client) -> None:
    fired = [make_timer(make_saga(f"many-{n}"), outcome="fired").pk for n in range(13)]

    messages = _messages(_run_action(admin_client_, *fired))

    assert messages[0] == ("warning", "13 timers were not requeued:")
    assert len(messages) == 1 + 10 + 1
    assert messages[-1] == ("warning", "... and 3 more.")


def test_a_timer_waiting_for_its_retry_shows_when_it_is_tried_again(viewer: Client) -> None:
    retry_at = clock.now() + timedelta(seconds=40)
    row = make_timer(make_saga("admin-retrying"), "nudge")
    SagaTimeout.objects.filter(pk=row.pk).update(attempts=3, next_attempt_at=retry_at)

    listed = viewer.get(_url("sagatimeout", "changelist") + "?status=retrying")
    page = viewer.get(_url("sagatimeout", "change", row.pk))

    assert [r.pk for r in listed.context["cl"].result_list] == [row.pk]
    assert "waiting for a retry" in listed.content.decode()
    assert _readonly_value(page, "next_attempt_at") == f"{retry_at:%Y-%m-%d %H:%M:%S} UTC"


def _readonly_value(page: Any, field_name: str) -> str:
    """What a read-only change page shows for ``field_name``."""
    for fieldset in page.context["adminform"]:
        for line in fieldset:
            for field in line:
                if field.field["name"] == field_name:
                    return strip_tags(field.contents())
    raise AssertionError(f"{field_name} is not on the page")


def test_a_delayed_message_is_listed_as_waiting_with_its_delivery_time(viewer: Client) -> None:
    deliver_at = clock.now() + timedelta(hours=3)
    waiting = publish(Unrouted("later"), deliver_at=deliver_at)
    now = publish(Unrouted("now"), defer=True)

    listed = viewer.get(_url("sagaoutboxmessage", "changelist") + "?status=waiting")
    page = viewer.get(_url("sagaoutboxmessage", "change", waiting.message_id))

    assert [r.pk for r in listed.context["cl"].result_list] == [waiting.message_id]
    shown = f"{deliver_at:%Y-%m-%d %H:%M:%S} UTC"  # TIME_ZONE = "UTC"
    assert shown in listed.content.decode()  # the deliver at column
    assert _readonly_value(page, "deliver_at") == shown
    assert _readonly_value(page, "status") == "waiting"
    assert _listed(viewer, "sagaoutboxmessage", "?status=ready") == {
        SagaOutboxMessage.objects.get(pk=now.message_id)
    }
