"""One word per idea: the code, the docs and the admin's templates say what docs/glossary.md
says, and none of the variants it rules out.

A rule is a pattern for a ruled-out variant and the word to use instead. A match is allowed
only inside a name listed in ``KEPT`` (a public or stored name that says it otherwise, such
as ``drain_saga_timeouts`` or ``outbox_undelivered``, or a name of Python, Django, Celery or
PostgreSQL that is not ours to change, such as ``asyncio.CancelledError`` or
``statement_timeout``), as a part of a dotted name or a route (``bsft_saga.timeouts``,
``saga.timeout.fired``, ``instances/<id>/timeouts/``), or, for a bare *timeout*, as a limit
on how long something may take (``timeout=20``, a lock timeout). CHANGELOG.md is not read:
it quotes what earlier releases called things. The glossary quotes a variant in italics
(*cancelled*) to rule it out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import ROOT

#: What is read: every text file of these folders, and these files.
FOLDERS = ("bsft_saga", "sample_project", "tests", "bench", "docs")
FILES = ("README.md", "CONTRIBUTING.md")
SUFFIXES = {".py", ".md", ".html", ".txt", ".css", ".toml", ".cfg"}
#: This file spells out the variants it looks for.
UNREAD = {"tests/project/test_words.py"}
#: What tools write, not people: ``make profile``'s flame graphs (git ignores them).
UNREAD_FOLDERS = ("bench/results/",)
GLOSSARY = "docs/glossary.md"


@dataclass(frozen=True)
class Rule:
    """A ruled-out variant: ``pattern`` finds it, ``instead`` is the glossary's word."""

    pattern: re.Pattern[str]
    instead: str


def _rule(pattern: str, instead: str) -> Rule:
    return Rule(re.compile(pattern, re.IGNORECASE), instead)


RULES = (
    _rule(r"cancell(?:ed|ing)", "canceled / canceling"),
    _rule(r"\bdispatch(?:ing)?(?:\s|#|\*)+pass(?:es)?\b", "timer pass (or pass, or drain)"),
    _rule(r"\blevers?\b", "operator action (cancel, reschedule)"),
    _rule(r"undelivered", "pending (not retired yet) or due (its time has come)"),
    _rule(r"\bstall(?:s|ing)?\b", "hangs (a process), has not moved (a saga)"),
    _rule(
        r"\b(?:stuck|stalled)\s+(?:pass|process|dispatcher|worker|loop|child|commit)"
        r"|\b(?:died|dead),?\s+(?:stuck|stalled)",
        "hangs: only a saga is stalled or stuck",
    ),
    _rule(r"timeout(?:s(?![a-z]))?", "timer"),
)

#: Names that say a ruled-out word and stay: public, stored, or not ours. A match is kept
#: when it lies inside one of these (``SagaTimeoutAdmin``, ``test_cancel_timeouts_...``).
KEPT = (
    # Python's, Django's, Celery's, PostgreSQL's, MariaDB's and the tools' own.
    "CancelledError",
    "TimeoutExpired",
    "statement_timeout",
    "idle_in_transaction_session_timeout",
    "idle_in_transaction_timeout",
    "idle_transaction_timeout",  # MariaDB's
    "lock_timeout",
    "deadlock_timeout",
    "connect_timeout",
    "socket_timeout",
    "visibility_timeout",
    "server_idle_timeout",
    "query_wait_timeout",
    "set_default_timeout",
    # Our own limits on how long a wait may take (not timers).
    "CONNECT_TIMEOUT_SECONDS",
    "READY_TIMEOUT",
    "STOP_TIMEOUT_S",
    "EVENT_TIMEOUT",
    "VISIBILITY_TIMEOUT",
    # The public and stored names where "timeout" means a timer (docs/glossary.md).
    "SagaTimeout",  # the model, and what is named after it
    "sagatimeout",  # its Django model name: admin URLs, permissions
    "TimeoutOutcome",
    "TimeoutScope",
    "TIMEOUTS",
    "schedule_timeout",
    "cancel_timeout",
    "cancel_all_timeouts",
    "drain_timeouts",
    "drain_saga_timeouts",
    "drain-saga-timeouts",  # the beat entry
    "cancel_saga_timeouts",
    "reschedule_saga_timeout",
    "requeue_saga_timeouts",
    "purge_saga_timeouts",
    "purge_timeouts",
    "cancel_timeouts",
    "reschedule_timeout",
    "timeouts_due",
    "timeouts_pending",
    "timeouts_dead_lettered",
    "timeouts_unconfirmed",
    "timeouts_total",
    "get_timeouts",  # the serializer's method for its ``timeouts`` field
    "timeouts__",  # lookups through SagaInstance.timeouts
    "instance-timeouts",  # the route's URL name
    "bsft_saga_timeout_",  # index names, Prometheus names
    "bsft_saga_one_pending_timeout_name",  # a constraint's name
    "ATTR_TIMEOUT_NAME",  # the span attribute saga.timeout.name
    "test_timeouts_",  # tests of bsft_saga.timeouts
    "test_api_timeouts",  # tests of the route
    "_saga_timeouts",  # the commands' common ending
    "moved-from-timeouts",  # the anchor of the settings page's heading
    "outbox_undelivered",
)

#: A bare *timeout* is a limit on how long something may take when one of these words comes
#: right before it (a lock timeout), or when it is an argument or a key (``timeout=20``).
LIMITS = {
    "lock",
    "visibility",
    "per-call",
    "relative",
    "socket",
    "connect",
    "statement",
    "client's",
    "idle-in-transaction",
}

#: Lines that define or test a kept name: (file, the line).
LINES = {
    # SagaHarness.timeouts() and the route instances/<id>/timeouts/.
    (
        "bsft_saga/testing.py",
        "def timeouts(self, flow: type | str, key: str | None = None) -> SagaTimeoutQuerySet:",
    ),
    (
        "bsft_saga/api/views.py",
        "def timeouts(self, request: Request, pk: str | None = None) -> Response:",
    ),
    # A mistyped section is refused.
    (
        "tests/test_conf.py",
        'pytest.raises(ImproperlyConfigured, match=r"BSFT_SAGA\\[TIMEOUT\\].*unknown section"),',
    ),
}

WORD = re.compile(r"[A-Za-z0-9_\-]")
QUOTES = {'"', "'", "`"}


@dataclass(frozen=True)
class Finding:
    """A ruled-out variant at ``path``:``line``: ``word``, the name it stands in."""

    path: str
    line: int
    word: str
    instead: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.word!r}: say {self.instead}"


def _read() -> Iterator[tuple[str, str]]:
    paths = [ROOT / name for name in FILES]
    for folder in FOLDERS:
        paths += sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in SUFFIXES)
    for path in paths:
        where = path.relative_to(ROOT).as_posix()
        if where in UNREAD or where.startswith(UNREAD_FOLDERS) or "__pycache__" in where:
            continue
        if not path.is_file():
            continue
        yield where, path.read_text(encoding="utf-8")


def _word_around(text: str, start: int, end: int) -> tuple[int, int]:
    """The span of the name (letters, digits, ``_`` and ``-``) the match lies in."""
    while start > 0 and WORD.match(text[start - 1]):
        start -= 1
    while end < len(text) and WORD.match(text[end]):
        end += 1
    return start, end


def _kept(where: str, text: str, start: int, end: int) -> bool:
    left, right = _word_around(text, start, end)
    word = text[left:right]
    for name in KEPT:
        at = word.find(name)
        while at != -1:
            if left + at <= start and end <= left + at + len(name):
                return True
            at = word.find(name, at + 1)
    if word.lower() not in {"timeout", "timeouts"}:
        return False
    before, after = text[left - 1 : left], text[right : right + 2]
    if before in {".", "/"} or after[:1] == "/" or (after[:1] == "." and after[1:].isalpha()):
        return True  # bsft_saga.timeouts, SagaInstance.timeouts, saga.timeout.fired, a route
    if after[:1] in {"=", ":"} or after == " =":
        return True  # an argument, a key, an annotation: timeout=20, "timeout": 20
    if before in QUOTES and after[:1] in {before, "("}:
        return True  # a name quoted as such: the field "timeouts", `timeouts()` of the harness
    if where.endswith(".py") and word == "timeout":
        return True  # Python's name for a wait limit: process.wait(timeout)
    previous = text[max(0, left - 40) : left].split()
    if previous and previous[-1].lower().strip("(*_'\"") == "saga":
        return True  # the model's verbose name: the admin's "saga timeouts"
    return bool(previous) and previous[-1].lower().strip("(*`") in LIMITS


def _quoted_in_glossary(where: str, text: str, start: int, end: int) -> bool:
    if where != GLOSSARY:
        return False
    opened = text.rfind("*", 0, start)
    return opened != -1 and "\n" not in text[opened:start] and text[end : end + 1] == "*"


def findings(files: Iterable[tuple[str, str]] | None = None) -> list[Finding]:
    """What the rules find in ``files`` (``(path, text)``; by default everything ``FOLDERS``
    and ``FILES`` hold), in file order."""
    found = []
    for where, text in _read() if files is None else files:
        lines = text.splitlines()
        for rule in RULES:
            for match in rule.pattern.finditer(text):
                start, end = match.span()
                if _kept(where, text, start, end) or _quoted_in_glossary(where, text, start, end):
                    continue
                line = text.count("\n", 0, start) + 1
                if (where, lines[line - 1].strip()) in LINES:
                    continue
                left, right = _word_around(text, start, end)
                found.append(Finding(where, line, text[left:right], rule.instead))
    return sorted(found, key=lambda finding: (finding.path, finding.line))


def test_the_code_and_the_docs_say_the_glossary_s_words() -> None:
    found = findings()

    assert not found, "\n".join(str(finding) for finding in found)


@pytest.mark.parametrize(
    ("line", "word"),
    [
        ("The order was cancelled.", "cancelled"),
        ("def schedule_reminder_timeout(ctx):", "schedule_reminder_timeout"),
        ("Each timeout fires once.", "timeout"),
        ("One dispatch pass fires them.", "dispatch pass"),
        ("the lever clears the claim", "lever"),
        ("<th>Undelivered outbox rows</th>", "Undelivered"),
        ("a dispatcher that stalls", "stalls"),
        ("a stuck process", "stuck process"),
    ],
)
def test_a_ruled_out_variant_is_found_with_its_line_and_the_word_to_use(
    line: str, word: str
) -> None:
    kept = "SagaTimeout rows; asyncio.CancelledError; result.get(timeout=10); a lock timeout."

    [finding] = findings([("docs/planted.md", f"{kept}\n{line}\n")])

    assert (finding.path, finding.line, finding.word) == ("docs/planted.md", 2, word)
    assert str(finding).startswith(f"docs/planted.md:2: {word!r}: say ")
