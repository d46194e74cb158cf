"""Finding the instance an event is for, and whether it already handled the message.

One query per flow and key, the first of every event: it reads the active instance with an
``EXISTS`` on its inbox (did it handle the message?) and one on its pending step-scoped
timers other than the one firing (does ending the wait cancel anything?), and, for a start
event, also a finished instance of the key that handled the message (a redelivered start
event starts nothing).
It is written once as SQL (see :mod:`bsft_saga.db.sql` for why); its columns come back as the
ORM converts them.

A pass firing timers asks the same for its whole batch in the one query that loads the
timers' sagas after the claim (:func:`firing_sagas`); the step a timer wakes then finds its
answer here (:func:`instance_for`) instead of asking again, unless the pass has committed
to that saga since, or the answer is older than a commit interval (see
:mod:`bsft_saga.delivery.passes`). An answer outdated all the same costs a lost
version race, never a wrong write: everything it says moves the saga's version on.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections

from bsft_saga.db import sql
from bsft_saga.delivery import staging
from bsft_saga.models import SagaInboxEntry, SagaInstance, SagaTimeout, TimeoutScope

#: The instance columns a plan needs (``handled`` is added by the query).
_COLUMNS = (
    "id",
    "correlation_key",
    "step_index",
    "version",
    "state",
    "deadline",
    "flow_version",
    "is_complete",
)


@dataclass(frozen=True)
class Found:
    """What a plan needs of an instance, and whether it handled the message."""

    pk: uuid.UUID
    correlation_key: str
    step_index: int
    version: int
    state: dict[str, Any]
    deadline: datetime | None
    flow_version: int
    is_complete: bool
    handled: bool
    #: Whether a step-scoped timer is pending. Only a step of the saga schedules one (a
    #: requeue bumps the version), so the version check keeps this true at commit.
    step_timers_pending: bool


class Answers:
    """What :func:`instance_for` would answer for one envelope, read before its step runs:
    by a pass's claim, for a timer's own saga (:func:`firing_sagas`), or by ``publish_many``
    for the events of a group (:func:`prefetch`). By question, ``(saga_type,
    correlation_key, or_finished, firing)``: the instance, or ``None`` for none.

    Each answer is taken once: a plan made again (after a commit made room for it) reads
    afresh. Whoever commits to a key since drops its answers (:meth:`forget`).
    """

    __slots__ = ("_by_question",)

    def __init__(self) -> None:
        self._by_question: dict[tuple[str, str, bool, int | None], Found | None] = {}

    def add(
        self,
        saga_type: str,
        correlation_key: str,
        found: Found | None,
        *,
        or_finished: bool,
        firing: int | None = None,
    ) -> None:
        """Record the answer to one question."""
        self._by_question[saga_type, correlation_key, or_finished, firing] = found

    def take(
        self, saga_type: str, correlation_key: str, *, or_finished: bool, firing: int | None
    ) -> Found | Unanswered | None:
        """The answer to this question, once; ``UNANSWERED`` if it was not read."""
        question = (saga_type, correlation_key, or_finished, firing)
        return self._by_question.pop(question, UNANSWERED)

    def forget(self, keys: Collection[tuple[str, str]]) -> None:
        """Drop the answers about these ``(saga_type, correlation_key)``: outdated."""
        for question in [q for q in self._by_question if q[:2] in keys]:
            del self._by_question[question]


class Unanswered(enum.Enum):
    """The answer to a question :class:`Answers` was not asked."""

    UNANSWERED = enum.auto()


UNANSWERED = Unanswered.UNANSWERED


_INSTANCE = tuple((SagaInstance, name) for name in _COLUMNS)
_CONVERTED = (*_INSTANCE, None, None)  # the two EXISTS
_MESSAGE_ID = SagaInboxEntry._meta.get_field("message_id")


def instance_for(
    saga_type: str,
    correlation_key: str,
    message_id: uuid.UUID,
    *,
    or_finished: bool,
    firing: int | None = None,
) -> Found | None:
    """The active instance of the key, else (``or_finished``) a finished one that handled
    ``message_id``; ``None`` if neither.

    ``firing``: the id of the timer whose event this is. It is still pending until the
    pass stamps it, but it is not a timer that ending the wait has to cancel. Its pass may
    know the answer already (:func:`firing_sagas`): it is then taken, once, without a query.
    """
    answers = staging.known(message_id)
    if isinstance(answers, Answers):
        answer = answers.take(saga_type, correlation_key, or_finished=or_finished, firing=firing)
        if answer is not UNANSWERED:
            return answer
    db = connections[DEFAULT_DB_ALIAS]  # the proxy, once (see sql._db)
    message = _MESSAGE_ID.get_db_prep_value(message_id, db, prepared=False)
    # 0 is no timer's id (they count from 1).
    params = [message, TimeoutScope.STEP.value, firing or 0, saga_type, correlation_key]
    if or_finished:
        params.append(message)
    row = sql.select_one(_sql(or_finished, db.vendor), params, _CONVERTED)
    if row is None:
        return None
    return _found(row)


def _found(row: tuple[Any, ...]) -> Found:
    pk, key, step_index, version, state, deadline, flow_version, is_complete, *exists = row
    return Found(
        pk=pk,
        correlation_key=key,
        step_index=step_index,
        version=version,
        state=state,
        deadline=deadline,
        flow_version=flow_version,
        is_complete=bool(is_complete),
        handled=bool(exists[0]),
        step_timers_pending=bool(exists[1]),
    )


#: One question of :func:`prefetch`: which event (its index among the answers), of which
#: message, asks about which flow's key, and whether a finished instance answers it too.
Question = tuple[int, uuid.UUID, str, str, bool]


def prefetch(questions: Collection[Question], count: int) -> list[Answers]:
    """The answers to ``questions`` about ``count`` events, as :func:`instance_for` would
    give them, in a few queries per saga type rather than one per event.

    Per saga type: the active instances of the keys asked about; the inbox rows of the
    messages asked about, with their instances (which also finds a finished instance of the
    key that handled its message); and, if there are active instances, which of them have a
    pending step-scoped timer. An answer outdated by a concurrent writer costs a lost
    version race at commit, as a claim's answer does.
    """
    answers = [Answers() for _ in range(count)]
    by_type: dict[str, list[Question]] = {}
    for question in questions:
        by_type.setdefault(question[2], []).append(question)
    for saga_type, asked in by_type.items():
        active, handled, finished, pending = _read(saga_type, asked)
        for index, message, _type, key, or_finished in asked:
            instance = active.get(key)
            if instance is None and or_finished:
                instance = finished.get((key, message))
            answers[index].add(
                saga_type,
                key,
                None
                if instance is None
                else replace(
                    instance,
                    handled=(instance.pk, message) in handled,
                    step_timers_pending=instance.pk in pending,
                ),
                or_finished=or_finished,
            )
    return answers


def _read(
    saga_type: str, asked: list[Question]
) -> tuple[
    dict[str, Found],
    set[tuple[uuid.UUID, uuid.UUID]],
    dict[tuple[str, uuid.UUID], Found],
    set[uuid.UUID],
]:
    """What :func:`prefetch` reads of one saga type: its active instances by key, the
    ``(saga, message)`` pairs of its inbox asked about, its finished instances by key and
    message handled, and the active instances with a pending step-scoped timer.

    Written as SQL, each list of keys or messages one array on PostgreSQL
    (:func:`bsft_saga.db.sql.among`): built through the ORM, a group's hundred keys and
    messages cost more Python than the database spends on the three queries.
    """
    active_sql, handled_sql, pending_sql = _prefetch_sql()
    quote = connection.ops.quote_name
    keys = {key for _index, _message, _type, key, _finished in asked}
    messages = {message for _index, message, _type, _key, _finished in asked}
    of_keys, key_params = sql.among(
        f"i.{quote('correlation_key')}", SagaInstance, "correlation_key", keys
    )
    active = {
        row[1]: _found((*row, False, False))
        for row in sql.select(active_sql.format(keys=of_keys), [saga_type, *key_params], _INSTANCE)
    }
    of_messages, message_params = sql.among(
        f"e.{quote('message_id')}", SagaInboxEntry, "message_id", messages
    )
    handled: set[tuple[uuid.UUID, uuid.UUID]] = set()
    finished: dict[tuple[str, uuid.UUID], Found] = {}
    for message, *row in sql.select(
        handled_sql.format(keys=of_keys, messages=of_messages),
        [saga_type, *key_params, *message_params],
        _HANDLED,
    ):
        handled.add((row[0], message))
        if row[-1]:  # is_complete
            finished[row[1], message] = _found((*row, True, False))
    pending: set[uuid.UUID] = set()
    if active:
        sagas = [found.pk for found in active.values()]
        of_sagas, saga_params = sql.among(f"s.{quote('saga_id')}", SagaTimeout, "saga", sagas)
        pending = {
            row[0]
            for row in sql.select(
                pending_sql.format(sagas=of_sagas),
                [*saga_params, TimeoutScope.STEP.value],
                _PENDING,
            )
        }
    return active, handled, finished, pending


_HANDLED = ((SagaInboxEntry, "message_id"), *_INSTANCE)
_PENDING = ((SagaTimeout, "saga"),)


@cache
def _prefetch_sql() -> tuple[str, str, str]:
    """:func:`_read`'s three queries: the active instances ``i`` of a saga type whose
    ``i.correlation_key`` is among ``{keys}``; the inbox rows ``e`` of its instances among
    those keys whose ``e.message_id`` is among ``{messages}``, with their instances; the
    sagas ``s.saga_id`` among ``{sagas}`` with a pending step-scoped timer. (Each ``{…}``
    is a condition of :func:`bsft_saga.db.sql.among`.)"""
    quote = connection.ops.quote_name
    instances = quote(SagaInstance._meta.db_table)
    inbox = quote(SagaInboxEntry._meta.db_table)
    timers = quote(SagaTimeout._meta.db_table)
    columns = ", ".join(f"i.{quote(name)}" for name in _COLUMNS)
    of_type = f"i.{quote('saga_type')} = %s"
    active = (
        f"SELECT {columns} FROM {instances} i WHERE {of_type} AND {{keys}} "
        f"AND NOT i.{quote('is_complete')}"
    )
    handled = (
        f"SELECT e.{quote('message_id')}, {columns} FROM {inbox} e "
        f"JOIN {instances} i ON i.{quote('id')} = e.{quote('saga_id')} "
        f"WHERE {of_type} AND {{keys}} AND {{messages}}"
    )
    pending = (
        f"SELECT DISTINCT s.{quote('saga_id')} FROM {timers} s WHERE {{sagas}} "
        f"AND s.{quote('scope')} = %s AND s.{quote('dispatched_at')} IS NULL"
    )
    return active, handled, pending


@dataclass(frozen=True)
class FiringSaga:
    """A claimed timer's saga: its row, and what :func:`instance_for` would answer for the
    timer's event (nothing, for a finished saga: a finished saga's timer wakes no step)."""

    instance: SagaInstance
    answers: Answers


def firing_sagas(timers: list[SagaTimeout]) -> dict[int, FiringSaga]:
    """The saga of each of ``timers`` (claimed, about to fire), by timer id: one query.

    Each comes with the lookup's answer for the timer's event, had the saga's flow and key
    asked for it now (:class:`Answers`).
    """
    if not timers:
        return {}
    db = connections[DEFAULT_DB_ALIAS]
    pk = db.ops.quote_name("id")
    of_ids, id_params = sql.among(f"t.{pk}", SagaTimeout, "id", [timer.pk for timer in timers])
    params = [TimeoutScope.STEP.value, *id_params]
    rows = sql.select(_firing_sql(db.vendor).format(ids=of_ids), params, _FIRING)
    # The instance holds what a pass reads of it; its other fields are deferred.
    instances = sql.loaded(SagaInstance, [row[1:-2] for row in rows], db.alias, _READ)
    found: dict[int, FiringSaga] = {}
    for row, instance in zip(rows, instances, strict=True):
        timer_id, saga_type = row[0], row[-3]
        answers = Answers()
        saga = _found((*row[1:-3], *row[-2:]))
        if not saga.is_complete:
            # A timer's event starts no saga: its step asks for the active instance alone.
            answers.add(saga_type, saga.correlation_key, saga, or_finished=False, firing=timer_id)
        found[timer_id] = FiringSaga(instance, answers)
    return found


#: What the claim reads of each timer's saga: the lookup's columns, and its type.
_READ = (*_COLUMNS, "saga_type")
_FIRING = (
    (SagaTimeout, "id"),
    *((SagaInstance, name) for name in _READ),
    None,
    None,
)


@cache
def _firing_sql(vendor: str) -> str:
    """The sagas of the timers ``t`` whose ids meet ``{ids}`` (a condition of
    :func:`bsft_saga.db.sql.among`), with the lookup's answers.

    On PostgreSQL each answer is a ``LATERAL`` subquery with a ``LIMIT``: probed per timer
    down an index. Written as ``EXISTS``, the planner may hash the whole inbox instead
    (cheaper on paper for up to some ten thousand rows), a cost that grows with the table.
    """
    quote = connection.ops.quote_name
    instances = quote(SagaInstance._meta.db_table)
    timers = quote(SagaTimeout._meta.db_table)
    columns = ", ".join(f"i.{quote(name)}" for name in _READ)
    saga, pk = quote("saga_id"), quote("id")
    handled, step_timers = _answers(message=f"t.{quote('message_id')}", firing=f"t.{pk}")
    joined = f"{timers} t JOIN {instances} i ON i.{pk} = t.{saga}"
    if vendor == "postgresql":
        return (
            f'SELECT t.{pk}, {columns}, "h"."one" IS NOT NULL, "p"."one" IS NOT NULL FROM '
            f'{joined} LEFT JOIN LATERAL (SELECT 1 AS one {handled} LIMIT 1) "h" ON true '
            f'LEFT JOIN LATERAL (SELECT 1 AS one {step_timers} LIMIT 1) "p" ON true '
            "WHERE {ids}"
        )
    return (
        f"SELECT t.{pk}, {columns}, EXISTS (SELECT 1 {handled}), "
        f"EXISTS (SELECT 1 {step_timers}) FROM {joined} WHERE {{ids}}"
    )


def _answers(*, message: str, firing: str) -> tuple[str, str]:
    """The ``FROM … WHERE …`` of the lookup's two answers about the instance ``i``: has it
    handled the message ``message``, and is a step-scoped timer other than ``firing``
    pending? (The scope is a parameter, before ``firing``.)"""
    quote = connection.ops.quote_name
    inbox = quote(SagaInboxEntry._meta.db_table)
    timers = quote(SagaTimeout._meta.db_table)
    saga, pk = quote("saga_id"), quote("id")
    handled = f"FROM {inbox} e WHERE e.{saga} = i.{pk} AND e.{quote('message_id')} = {message}"
    step_timers = (
        f"FROM {timers} s WHERE s.{saga} = i.{pk} AND s.{quote('scope')} = %s "
        f"AND s.{quote('dispatched_at')} IS NULL AND s.{pk} <> {firing}"
    )
    return handled, step_timers


@cache
def _sql(or_finished: bool, vendor: str) -> str:
    quote = connection.ops.quote_name
    instances = quote(SagaInstance._meta.db_table)
    inbox = quote(SagaInboxEntry._meta.db_table)
    columns = ", ".join(f"i.{quote(name)}" for name in _COLUMNS)
    saga, message, pk = quote("saga_id"), quote("message_id"), quote("id")
    handled, step_timers = _answers(message="%s", firing="%s")
    which = f"NOT i.{quote('is_complete')}"
    if or_finished:
        which = f"({which} OR i.{pk} IN (SELECT f.{saga} FROM {inbox} f WHERE f.{message} = %s))"
    return (
        f"SELECT {columns}, EXISTS (SELECT 1 {handled}), EXISTS (SELECT 1 {step_timers}) "
        f"FROM {instances} i WHERE i.{quote('saga_type')} = %s "
        f"AND i.{quote('correlation_key')} = %s AND {which} "
        f"ORDER BY i.{quote('is_complete')} LIMIT 1"
    )
