"""``manage.py check``: every misconfiguration is listed at once, each with an id.

Flows are collected from every app config's ``saga_flows`` in ``ready()``; the problems found
while loading them are reported by the checks rather than raised at start-up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from bsft_saga import SagaFlow, UnknownFlowVersion
from bsft_saga.checks import check_event_names, check_flows
from bsft_saga.events import registry as event_registry_module
from bsft_saga.events.registry import EventRegistry
from bsft_saga.flows import registry as registry_module
from bsft_saga.flows.registry import FlowRegistry, flow_registry
from tests.testapp import flows, timer_flows
from tests.testapp.events import OrderPlaced, Ping
from tests.testapp.parcel_flows import ParcelFlow, ParcelFlowV1


def saga_messages(messages: Iterable[CheckMessage]) -> list[CheckMessage]:
    return [m for m in messages if (m.id or "").startswith("bsft_saga.")]


def ids(messages: Iterable[CheckMessage]) -> list[str]:
    return sorted(m.id or "" for m in messages)


# --- flows for the registry tests -----------------------------------------------------


class HealthyFlow(SagaFlow):
    saga_type = "tests.checks.healthy"

    def configure(self, factory: Any) -> None:
        factory.stateless().start_with(Ping).complete()


class SameSagaTypeFlow(SagaFlow):
    saga_type = "tests.checks.healthy"

    def configure(self, factory: Any) -> None:
        factory.stateless().start_with(OrderPlaced, key=lambda e: e.order_id).complete()


class NoStartStepFlow(SagaFlow):
    saga_type = "tests.checks.no-start"

    def configure(self, factory: Any) -> None:
        factory.stateless().complete()


class ExplodingConfigureFlow(SagaFlow):
    saga_type = "tests.checks.exploding"

    def configure(self, factory: Any) -> None:
        raise RuntimeError("configure() needs a settings value that is not there")


@dataclass
class FakeAppConfig:
    """Stands in for an ``AppConfig``: the registry only reads ``saga_flows``."""

    label: str
    saga_flows: list[Any]


BROKEN_APPS = [
    FakeAppConfig(
        "orders",
        [
            "tests.test_checks.HealthyFlow",
            "tests.nowhere.flows.MissingFlow",  # E010: cannot be imported
            "tests.testapp.events.OrderPlaced",  # E010: not a SagaFlow
            "tests.test_checks.NoStartStepFlow",  # E011: configure() is wrong
        ],
    ),
    FakeAppConfig(
        "billing",
        [ExplodingConfigureFlow, SameSagaTypeFlow],  # E011, E012
    ),
]


def loaded(app_configs: list[FakeAppConfig]) -> FlowRegistry:
    registry = FlowRegistry()
    registry.load(app_configs)
    return registry


# --- collecting flows -----------------------------------------------------------------


def test_ready_collects_the_flows_of_every_installed_app() -> None:
    listed = [*flows.FLOWS, *timer_flows.FLOWS]
    for flow in listed:
        assert flow_registry.get(flow).saga_type == flow.saga_type
    assert {d.saga_type for d in flow_registry.all()} >= {f.saga_type for f in listed}
    assert flow_registry.problems == []


def test_the_registry_routes_an_event_type_to_the_flows_that_await_it() -> None:
    [definition] = flow_registry.flows_for("tests.order.placed")
    assert definition.saga_type == flows.OrderFlow.saga_type
    assert flow_registry.flows_for("tests.engine.unrouted") == ()


def test_an_unknown_flow_is_a_lookup_error_listing_the_known_ones() -> None:
    with pytest.raises(LookupError, match=r"tests\.order"):
        flow_registry.get("tests.never-declared")


def test_the_registry_loads_good_flows_and_keeps_every_problem() -> None:
    registry = loaded(BROKEN_APPS)
    assert [d.saga_type for d in registry.all()] == ["tests.checks.healthy"]
    assert [p.check_id for p in registry.problems] == [
        "bsft_saga.E010",
        "bsft_saga.E010",
        "bsft_saga.E011",
        "bsft_saga.E011",
        "bsft_saga.E012",
    ]


def test_an_unimportable_flow_path_is_e010_naming_the_path() -> None:
    registry = loaded([FakeAppConfig("orders", ["tests.nowhere.flows.MissingFlow"])])
    [problem] = registry.problems
    assert problem.check_id == "bsft_saga.E010"
    assert "tests.nowhere.flows.MissingFlow" in problem.message
    assert "FakeAppConfig.saga_flows" in problem.message


def test_a_listed_class_that_is_not_a_saga_flow_is_e010() -> None:
    registry = loaded([FakeAppConfig("orders", ["tests.testapp.events.OrderPlaced"])])
    [problem] = registry.problems
    assert problem.check_id == "bsft_saga.E010"
    assert "not a SagaFlow subclass" in problem.message


def test_a_flow_whose_configure_fails_is_e011_naming_the_flow() -> None:
    registry = loaded([FakeAppConfig("orders", [NoStartStepFlow, ExplodingConfigureFlow])])
    no_start, exploding = registry.problems
    assert (no_start.check_id, exploding.check_id) == ("bsft_saga.E011", "bsft_saga.E011")
    assert "tests.test_checks.NoStartStepFlow" in no_start.message
    assert "no start step" in no_start.message
    assert "needs a settings value" in exploding.message
    assert exploding.obj is ExplodingConfigureFlow
    assert registry.all() == ()


def test_two_flows_with_one_saga_type_are_e012_and_the_first_one_stays() -> None:
    registry = loaded([FakeAppConfig("orders", [HealthyFlow, SameSagaTypeFlow])])
    [problem] = registry.problems
    assert problem.check_id == "bsft_saga.E012"
    assert "tests.test_checks.SameSagaTypeFlow" in problem.message
    assert "tests.test_checks.HealthyFlow" in problem.message
    assert "'tests.checks.healthy'" in problem.message
    assert problem.hint
    assert registry.get("tests.checks.healthy").flow_name == "tests.test_checks.HealthyFlow"


def test_reloading_the_registry_forgets_earlier_flows_and_problems() -> None:
    registry = loaded(BROKEN_APPS)
    registry.load([FakeAppConfig("orders", [HealthyFlow])])
    assert registry.problems == []
    assert [d.saga_type for d in registry.all()] == ["tests.checks.healthy"]


def test_an_app_without_saga_flows_contributes_nothing() -> None:
    registry = loaded([])
    registry.load(apps.get_app_configs())
    assert registry.problems == []
    assert {d.saga_type for d in registry.all()} == {d.saga_type for d in flow_registry.all()}


# --- the system checks ----------------------------------------------------------------


def test_the_test_settings_pass_the_checks() -> None:
    out = StringIO()
    call_command("check", stdout=out)
    assert "no issues" in out.getvalue()


def test_check_flows_reports_every_registry_problem_with_its_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry_module, "flow_registry", loaded(BROKEN_APPS))
    messages = check_flows()
    assert ids(messages) == [
        "bsft_saga.E010",
        "bsft_saga.E010",
        "bsft_saga.E011",
        "bsft_saga.E011",
        "bsft_saga.E012",
    ]
    assert all(m.is_serious() for m in messages)


def test_manage_py_check_fails_listing_every_flow_problem(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry_module, "flow_registry", loaded(BROKEN_APPS))
    with pytest.raises(SystemCheckError) as raised:
        call_command("check", stdout=StringIO(), stderr=StringIO())
    report = str(raised.value)
    for needle in (
        "bsft_saga.E010",
        "bsft_saga.E011",
        "bsft_saga.E012",
        "tests.nowhere.flows.MissingFlow",
        "ExplodingConfigureFlow",
    ):
        assert needle in report


def test_unknown_and_invalid_settings_are_each_an_e001() -> None:
    bad = {
        "DELIVERY": {"BATCH_SIZE": 0, "POLL_INTERVALS": 5},
        "TIMEOUTS": {"CATCH_UP_POLICY": "fire_some"},
        "ENGNIE": {},
    }
    with override_settings(BSFT_SAGA=bad):
        messages = saga_messages(run_checks())
    assert ids(messages) == ["bsft_saga.E001"] * 4
    text = "\n".join(m.msg for m in messages)
    for path in (
        "DELIVERY.BATCH_SIZE",
        "TIMEOUTS.CATCH_UP_POLICY",
        "DELIVERY.POLL_INTERVALS",
        "BSFT_SAGA[ENGNIE]",
    ):
        assert path in text
    assert all(m.obj == "BSFT_SAGA" and m.hint for m in messages)


def test_manage_py_check_fails_on_a_bad_setting() -> None:
    with (
        override_settings(BSFT_SAGA={"DELIVERY": {"MAX_DISPATCH_ATTEMPTS": -1}}),
        pytest.raises(SystemCheckError, match=r"bsft_saga\.E001.*MAX_DISPATCH_ATTEMPTS"),
    ):
        call_command("check", stdout=StringIO(), stderr=StringIO())


def test_a_bsft_saga_setting_that_is_not_a_dict_is_an_e001() -> None:
    with override_settings(BSFT_SAGA=["TIMEOUTS"]):
        messages = saga_messages(run_checks())
    assert ids(messages) == ["bsft_saga.E001"]
    assert "must be a dict" in messages[0].msg


def test_a_calendar_that_cannot_be_built_is_e020() -> None:
    calendars = {"mars": {"BACKEND": "bsft_saga.calendars.MartianCalendar"}}
    with override_settings(BSFT_SAGA={"CALENDARS": calendars}):
        messages = saga_messages(run_checks())
    assert ids(messages) == ["bsft_saga.E020"]
    assert "'mars'" in messages[0].msg


def test_use_tz_false_is_e002() -> None:
    with override_settings(USE_TZ=False):
        messages = saga_messages(run_checks())
    assert ids(messages) == ["bsft_saga.E002"]
    assert messages[0].obj == "USE_TZ"


@pytest.mark.django_db
def test_the_skip_locked_warning_depends_on_the_database() -> None:
    from django.db import connection

    messages = saga_messages(run_checks(databases=["default"]))
    expected = [] if connection.features.has_select_for_update_skip_locked else ["bsft_saga.W001"]
    assert ids(messages) == expected


def test_checks_read_the_settings_at_check_time() -> None:
    assert settings.BSFT_SAGA  # the suite's own, valid settings
    assert saga_messages(run_checks()) == []
    with override_settings(BSFT_SAGA={"DELIVERY": {"BATCH_SIZE": "lots"}}):
        assert ids(saga_messages(run_checks())) == ["bsft_saga.E001"]
    assert saga_messages(run_checks()) == []


def test_a_key_in_its_old_place_is_a_w003_naming_its_new_place() -> None:
    with override_settings(
        BSFT_SAGA={"TIMEOUTS": {"BATCH_SIZE": 50, "CATCH_UP_POLICY": "fire_all"}}
    ):
        messages = saga_messages(run_checks())
    assert ids(messages) == ["bsft_saga.W003"]
    [warning] = messages
    assert warning.msg.startswith(
        'BSFT_SAGA["TIMEOUTS"]["BATCH_SIZE"] has moved to BSFT_SAGA["DELIVERY"]["BATCH_SIZE"]'
    )
    assert 'BSFT_SAGA["DELIVERY"]["BATCH_SIZE"]' in (warning.hint or "")
    assert warning.obj == "BSFT_SAGA"


def test_the_w003_configuration_md_shows_is_what_check_prints() -> None:
    docs = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    out = StringIO()
    with override_settings(BSFT_SAGA={"TIMEOUTS": {"BATCH_SIZE": 50}}):
        call_command("check", stdout=out, stderr=out)
    lines = out.getvalue().splitlines()
    at = next(i for i, line in enumerate(lines) if "bsft_saga.W003" in line)
    assert "\n".join(lines[at : at + 2]) + "\n" in docs  # the warning and its hint


def test_each_key_in_its_old_place_is_a_w003_of_its_own() -> None:
    with override_settings(BSFT_SAGA={"TIMEOUTS": {"POLL_INTERVAL": 5, "CLAIM_LEASE": 600}}):
        messages = saga_messages(run_checks())
    assert ids(messages) == ["bsft_saga.W003"] * 2
    assert ["POLL_INTERVAL" in messages[0].msg, "CLAIM_LEASE" in messages[1].msg] == [True, True]


def test_a_key_in_both_places_is_an_e001_naming_both() -> None:
    raw = {"TIMEOUTS": {"CLAIM_LEASE": 600}, "DELIVERY": {"CLAIM_LEASE": 300}}
    with override_settings(BSFT_SAGA=raw):
        messages = saga_messages(run_checks())
    assert ids(messages) == ["bsft_saga.E001"]
    assert 'BSFT_SAGA["TIMEOUTS"]["CLAIM_LEASE"]' in messages[0].msg
    assert 'BSFT_SAGA["DELIVERY"]["CLAIM_LEASE"]' in messages[0].msg


# --- flow versions (previous_versions) -----------------------------------------------------


class CurrentParcelFlow(ParcelFlowV1):
    """Version 3 of the parcel flow, with each kind of bad previous_versions entry below."""

    saga_type = "tests.parcel"
    version = 3


class OtherTypeFlow(ParcelFlowV1):
    saga_type = "tests.checks.other"
    version = 1


class AlsoVersionOneFlow(ParcelFlowV1):
    saga_type = "tests.parcel"
    version = 1


class VersionZeroFlow(ParcelFlowV1):
    saga_type = "tests.checks.version-zero"
    version = 0


def with_previous(*entries: Any, version: int = 3) -> type[SagaFlow]:
    return type(
        "CurrentParcelFlow",
        (CurrentParcelFlow,),
        {"saga_type": "tests.parcel", "version": version, "previous_versions": list(entries)},
    )


def test_previous_versions_are_installed_next_to_the_current_one() -> None:
    registry = loaded([FakeAppConfig("parcels", [ParcelFlow])])

    assert registry.problems == []
    assert [d.version for d in registry.versions("tests.parcel")] == [1, 2]
    assert registry.get("tests.parcel").version == 2
    assert registry.definition_for("tests.parcel", 1).flow_name == (
        "tests.testapp.parcel_flows.ParcelFlowV1"
    )
    assert registry.get(ParcelFlowV1) is registry.definition_for("tests.parcel", 1)
    assert registry.all() == (registry.get(ParcelFlow),)  # one saga type, not two flows


def test_an_event_type_routes_to_every_version_that_awaits_it() -> None:
    v1, v2 = flow_registry.versions("tests.parcel")

    assert set(flow_registry.flows_for("tests.parcel.ordered")) >= {v1, v2}
    assert v1 not in flow_registry.flows_for("tests.parcel.weighed")
    assert flow_registry.is_current(v2)
    assert not flow_registry.is_current(v1)


def test_a_version_no_installed_flow_declares_is_unknown_flow_version() -> None:
    with pytest.raises(UnknownFlowVersion, match=r"version 7 of 'tests\.parcel'.*\(s\) 1, 2"):
        flow_registry.definition_for("tests.parcel", 7)
    with pytest.raises(UnknownFlowVersion, match="no installed flow has this saga_type"):
        flow_registry.definition_for("tests.never-declared", 1)


@pytest.mark.parametrize(
    ("entry", "check_id", "needle"),
    [
        ("tests.nowhere.flows.OldFlow", "bsft_saga.E013", "cannot import 'tests.nowhere"),
        ("tests.testapp.events.OrderPlaced", "bsft_saga.E013", "is not a SagaFlow subclass"),
        (NoStartStepFlow, "bsft_saga.E011", "no start step"),
        (VersionZeroFlow, "bsft_saga.E011", "version must be a positive int, got 0"),
        (OtherTypeFlow, "bsft_saga.E014", "has saga_type 'tests.checks.other'"),
        (CurrentParcelFlow, "bsft_saga.E015", "version 3, which is not lower than"),
    ],
    ids=["unimportable", "not-a-flow", "broken", "bad-version", "other-saga-type", "not-lower"],
)
def test_a_bad_previous_version_is_reported_and_left_out(
    entry: Any, check_id: str, needle: str
) -> None:
    registry = loaded([FakeAppConfig("parcels", [with_previous(ParcelFlowV1, entry)])])

    [problem] = registry.problems
    assert problem.check_id == check_id
    assert needle in problem.message
    assert "CurrentParcelFlow.previous_versions" in problem.message
    assert problem.hint
    assert [d.version for d in registry.versions("tests.parcel")] == [1, 3]


def test_two_previous_versions_with_one_version_are_e016_and_the_first_stays() -> None:
    registry = loaded([FakeAppConfig("parcels", [with_previous(ParcelFlowV1, AlsoVersionOneFlow)])])

    [problem] = registry.problems
    assert problem.check_id == "bsft_saga.E016"
    assert "AlsoVersionOneFlow and tests.testapp.parcel_flows.ParcelFlowV1" in problem.message
    assert "both declare version 1" in problem.message
    assert registry.definition_for("tests.parcel", 1).flow_name.endswith("ParcelFlowV1")


def test_a_flow_with_a_version_that_is_not_a_positive_int_is_e011() -> None:
    registry = loaded([FakeAppConfig("parcels", [VersionZeroFlow])])

    [problem] = registry.problems
    assert problem.check_id == "bsft_saga.E011"
    assert registry.all() == ()


def test_manage_py_check_reports_bad_previous_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = with_previous("tests.nowhere.flows.OldFlow", OtherTypeFlow, CurrentParcelFlow)
    monkeypatch.setattr(registry_module, "flow_registry", loaded([FakeAppConfig("p", [bad])]))

    with pytest.raises(SystemCheckError) as raised:
        call_command("check", stdout=StringIO(), stderr=StringIO())

    report = str(raised.value)
    for needle in ("bsft_saga.E013", "bsft_saga.E014", "bsft_saga.E015", "previous_versions"):
        assert needle in report


# --- event names claimed twice ---------------------------------------------------------------


def test_an_event_name_claimed_by_two_classes_is_e017_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = EventRegistry()
    monkeypatch.setattr(event_registry_module, "event_registry", registry)
    registry.register(OrderPlaced, "tests.checks.placed", ())
    registry.register(Ping, "tests.checks.ping", ("tests.checks.placed",))

    messages = check_event_names()

    [message] = messages
    assert message.id == "bsft_saga.E017"
    assert message.msg == (
        "Event type name 'tests.checks.placed' is claimed by tests.testapp.events.OrderPlaced "
        "and, as an alias, by tests.testapp.events.Ping; tests.testapp.events.OrderPlaced "
        "keeps it."
    )
    assert message.hint
    assert "aliases" in message.hint
    assert message.is_serious()
    with pytest.raises(SystemCheckError, match=r"bsft_saga\.E017"):
        call_command("check", stdout=StringIO(), stderr=StringIO())


def test_the_suites_own_events_claim_no_name_twice() -> None:
    assert check_event_names() == []
