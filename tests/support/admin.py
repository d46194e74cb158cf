"""Rows holding a recognisable secret in every content column, and admin clients to read them.

Shared by the admin content tests, the hostile query walk and the browser tests: each asserts
where ``SECRET`` may appear (content readers, audited) and where it must not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from bsft_saga import clock
from bsft_saga.models import SagaInstance, SagaOutboxMessage, SagaTimeout
from tests.testapp.ops_flows import make_saga, make_timer

SECRET = "customer-4711@example.com"
MODELS = ("sagainstance", "sagatimeout", "sagaoutboxmessage", "sagaauditrecord")
VIEW_ALL = tuple(f"view_{model}" for model in MODELS)
CONTENT = "read_saga_content"


@dataclass(frozen=True)
class ContentRows:
    saga: SagaInstance
    dead: SagaTimeout  # dead-lettered: payload, last_error and reason hold SECRET
    pending: SagaTimeout
    outbox: SagaOutboxMessage  # staged by the saga's step
    orphan: SagaOutboxMessage  # publish(defer=True): no saga

    def change_urls(self) -> dict[str, str]:
        return {
            "instance": admin_url("sagainstance", "change", self.saga.pk),
            "timer": admin_url("sagatimeout", "change", self.dead.pk),
            "outbox": admin_url("sagaoutboxmessage", "change", self.outbox.pk),
            "orphan outbox": admin_url("sagaoutboxmessage", "change", self.orphan.pk),
        }


def admin_url(model: str, view: str, *args: Any) -> str:
    return reverse(f"admin:bsft_saga_{model}_{view}", args=args)


def staff_user(username: str, *codenames: str, superuser: bool = False) -> User:
    if superuser:
        return User.objects.create_superuser(username, f"{username}@example.com", "pw")
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="bsft_saga", codename__in=codenames)
    )
    return user


def staff_client(username: str, *codenames: str, superuser: bool = False) -> Client:
    client = Client()
    client.force_login(staff_user(username, *codenames, superuser=superuser))
    return client


def make_content_rows(key: str = "secret-1") -> ContentRows:
    saga = make_saga(key)
    SagaInstance.objects.filter(pk=saga.pk).update(state={"reminded": False, "email": SECRET})
    saga.refresh_from_db()
    dead = make_timer(saga, "dead", outcome="dead_lettered", reason=f"ValueError: {SECRET}")
    pending = make_timer(saga, "pending")
    SagaTimeout.objects.filter(saga=saga).update(payload={"email": SECRET})
    return ContentRows(
        saga=saga,
        dead=dead,
        pending=pending,
        outbox=_outbox(saga, error=f"ConnectionError: {SECRET}"),
        orphan=_outbox(None, error=""),
    )


def _outbox(saga: SagaInstance | None, *, error: str) -> SagaOutboxMessage:
    return SagaOutboxMessage.objects.create(
        saga=saga,
        event_type="tests.ops.noted",
        payload={"email": SECRET},
        created_at=clock.now(),
        attempts=1 if error else 0,
        last_error=error,
    )
