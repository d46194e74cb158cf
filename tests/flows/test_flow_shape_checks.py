"""Flow shapes ``manage.py check`` refuses: keyed and unkeyed waits mixed (E018), a
``keep_early`` on the start step (E019), a ``meanwhile`` for a type its
own step awaits (E021); and a keyed flow's key returning ``""`` at run time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from bsft_saga import SagaFlow, publish
from bsft_saga.flows.registry import FlowRegistry, flow_registry
from tests.testapp.branch_events import (
    NoteAdded,
    OrderAccepted,
    ParcelDelivered,
    ParcelPacked,
    PaymentAuthorised,
)
from tests.testapp.branch_flows import FulfilmentFlow


def _key(e: Any) -> str:
    return str(e.order_id)


class MixedKeysFlow(SagaFlow):
    saga_type = "tests.checks.mixed-keys"

    def configure(self, factory: Any) -> None:
        factory.stateless().start_with(OrderAccepted, key=_key).wait_for(ParcelPacked).complete()


class KeepsTooEarlyFlow(SagaFlow):
    saga_type = "tests.checks.keeps-too-early"

    def configure(self, factory: Any) -> None:
        (
            factory.stateless()
            .start_with(OrderAccepted, key=_key)
            .or_(ParcelPacked, key=_key, keep_early=True)
            .wait_for(NoteAdded, key=_key)
            .complete()
        )


class KeepsOnTheFirstWaitFlow(SagaFlow):
    saga_type = "tests.checks.keeps-on-the-first-wait"

    def configure(self, factory: Any) -> None:
        (
            factory.stateless()
            .start_with(OrderAccepted, key=_key)
            .wait_for(ParcelPacked, key=_key, keep_early=True)
            .complete()
        )


class MeanwhileAwaitedFlow(SagaFlow):
    saga_type = "tests.checks.meanwhile-awaited"

    def configure(self, factory: Any) -> None:
        (
            factory.stateless()
            .start_with(OrderAccepted, key=_key)
            .wait_for(NoteAdded, key=_key)
            .meanwhile(NoteAdded, lambda ctx, e: None, key=_key)
            .complete()
        )


@dataclass
class FakeAppConfig:
    label: str
    saga_flows: list[Any]


def problems_of(flow: type[SagaFlow]) -> list[Any]:
    registry = FlowRegistry()
    registry.load([FakeAppConfig("shapes", [flow])])
    return registry.problems


def test_a_flow_mixing_keyed_and_unkeyed_waits_is_e018_naming_flow_and_step() -> None:
    [problem] = problems_of(MixedKeysFlow)
    assert problem.check_id == "bsft_saga.E018"
    assert "MixedKeysFlow" in problem.message
    assert "step 1 (wait_for ParcelPacked)" in problem.message
    assert problem.hint


def test_keep_early_on_the_start_step_is_e019_naming_flow_and_step() -> None:
    [problem] = problems_of(KeepsTooEarlyFlow)
    assert problem.check_id == "bsft_saga.E019"
    assert "KeepsTooEarlyFlow" in problem.message
    assert "step 0 (start_with OrderAccepted | ParcelPacked)" in problem.message


def test_keep_early_on_the_first_wait_is_no_problem() -> None:
    # It keeps an event that arrives before its saga starts.
    assert problems_of(KeepsOnTheFirstWaitFlow) == []


def test_meanwhile_for_a_type_the_step_awaits_is_e021_naming_flow_and_step() -> None:
    [problem] = problems_of(MeanwhileAwaitedFlow)
    assert problem.check_id == "bsft_saga.E021"
    assert "MeanwhileAwaitedFlow" in problem.message
    assert "step 1 (wait_for NoteAdded)" in problem.message


def test_the_flows_of_the_test_app_have_no_shape_problem() -> None:
    assert problems_of(FulfilmentFlow) == []


def test_manage_py_check_fails_on_a_bad_flow_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flow_registry, "problems", problems_of(KeepsTooEarlyFlow))
    with pytest.raises(SystemCheckError, match=r"bsft_saga\.E019"):
        call_command("check")


@pytest.mark.django_db(transaction=True)
def test_a_key_returning_an_empty_str_is_a_value_error_naming_flow_and_step() -> None:
    publish(OrderAccepted("o-1"))
    with pytest.raises(ValueError, match=r"FulfilmentFlow .*step \d .*empty str"):
        publish(PaymentAuthorised(""))
    with pytest.raises(ValueError, match=r"FulfilmentFlow"):
        publish(ParcelDelivered(""))
