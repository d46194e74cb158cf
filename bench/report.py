"""The results: bench/results/latest.json, the numbers section of docs/performance.md, and
the summary table on stdout.

Only the text between ``<!-- bench:results -->`` and ``<!-- /bench:results -->`` in
docs/performance.md is rewritten; the narrative around it is the humans'. A run below the
full sizes says so everywhere it writes (``"size": "smoke"``), so that its numbers are
never mistaken for a measurement.
"""

from __future__ import annotations

import json
import operator
import os
import platform
import subprocess
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.measure import median

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "latest.json"
PERFORMANCE_DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- bench:results -->", "<!-- /bench:results -->"

# In the order the table lists them.
KEYS = (
    "step_events_per_s",
    "step_ratio_vs_handwritten",
    "step_events_per_s_raw_row",
    "step_ratio_vs_raw_row",
    "step_events_per_s_raw_set",
    "step_ratio_vs_raw_set",
    "bulk_step_events_per_s",
    "bulk_step_ratio_vs_publish_loop",
    "bulk_step_ratio_vs_raw_set",
    "sqlite_step_events_per_s",
    "web_publish_requests_per_s",
    "web_handwritten_requests_per_s",
    "web_publish_ratio_vs_handwritten",
    "web_publish_p99_ms",
    "web_handwritten_p99_ms",
    "drain_timers_per_s_1p",
    "sqlite_drain_timers_per_s",
    "drain_timers_per_s_2p",
    "drain_ratio_vs_handwritten",
    "drain_timers_per_s_raw_batch",
    "drain_ratio_vs_raw_batch",
    "drain_timers_per_s_raw_set",
    "drain_ratio_vs_raw_set",
    "drain_scaling_2p_vs_1p",
    "drain_ratio_two_timers_per_saga",
    "drain_ratio_traced_vs_untraced",
    "mariadb_drain_timers_per_s",
    "mariadb_drain_timers_per_s_handwritten",
    "mariadb_drain_ratio_vs_handwritten",
    "drain_timers_per_s_slow_receivers",
    "mails_sent_twice_after_kill",
    "poll_ms_10k",
    "poll_ms_1m",
    "poll_ratio_1m_vs_10k",
    "dispatcher_rss_mb_10k",
    "dispatcher_rss_mb_100k",
)
#: Keys of a server or a tool a run may lack (bench/mariadb.py; hey or gunicorn for
#: bench/web.py, whose keys a failed run also leaves out): without it they are "not measured".
OPTIONAL_KEYS = frozenset(key for key in KEYS if key.startswith(("mariadb_", "web_")))


@dataclass(frozen=True)
class Target:
    """One target of ``make bench``: ``value(metrics) <op> threshold``."""

    name: str
    value: Callable[[dict[str, float]], float]
    op: str  # ">=" or "<="
    threshold: float

    def check(self, metrics: dict[str, float]) -> dict[str, Any]:
        """The verdict: ``"pass"`` is True or False, or None (not measured) when a key it
        reads is missing from ``metrics``."""
        try:
            value = self.value(metrics)
        except KeyError:
            return {
                "name": self.name,
                "value": None,
                "op": self.op,
                "threshold": self.threshold,
                "pass": None,
            }
        holds = (operator.ge if self.op == ">=" else operator.le)(value, self.threshold)
        return {
            "name": self.name,
            "value": round(value, 3),
            "op": self.op,
            "threshold": self.threshold,
            "pass": holds,
        }


def _key(name: str) -> Callable[[dict[str, float]], float]:
    return lambda metrics: metrics[name]


TARGETS = (
    Target("drain_ratio_vs_handwritten", _key("drain_ratio_vs_handwritten"), ">=", 1.5),
    Target("drain_ratio_vs_raw_batch", _key("drain_ratio_vs_raw_batch"), ">=", 0.5),
    Target(
        "mariadb_drain_ratio_vs_handwritten", _key("mariadb_drain_ratio_vs_handwritten"), ">=", 1.5
    ),
    Target("drain_ratio_vs_raw_set", _key("drain_ratio_vs_raw_set"), ">=", 0.5),
    Target("drain_scaling_2p_vs_1p", _key("drain_scaling_2p_vs_1p"), ">=", 1.6),
    Target("drain_ratio_two_timers_per_saga", _key("drain_ratio_two_timers_per_saga"), ">=", 0.8),
    Target("step_ratio_vs_handwritten", _key("step_ratio_vs_handwritten"), ">=", 1.0),
    Target("bulk_step_ratio_vs_publish_loop", _key("bulk_step_ratio_vs_publish_loop"), ">=", 5),
    Target("bulk_step_ratio_vs_raw_set", _key("bulk_step_ratio_vs_raw_set"), ">=", 0.5),
    Target("web_publish_ratio_vs_handwritten", _key("web_publish_ratio_vs_handwritten"), ">=", 0.8),
    Target("poll_ratio_1m_vs_10k", _key("poll_ratio_1m_vs_10k"), "<=", 1.5),
    Target(
        "dispatcher_rss_mb_100k - dispatcher_rss_mb_10k",
        lambda m: m["dispatcher_rss_mb_100k"] - m["dispatcher_rss_mb_10k"],
        "<=",
        20,
    ),
)


def build(
    *,
    size: str,
    sizes: dict[str, int],
    rounds: dict[str, list[float]],
    detail: dict[str, Any],
    facts: dict[str, Any],
) -> dict[str, Any]:
    """The document written to latest.json; each key's value is the median of its rounds.

    Only ``OPTIONAL_KEYS`` may be missing from ``rounds``: they are listed under
    ``not_measured``, and ``all_targets_pass`` is over the targets that were measured.
    """
    unknown, missing = set(rounds) - set(KEYS), set(KEYS) - set(rounds)
    assert not unknown, sorted(unknown)
    assert missing <= OPTIONAL_KEYS, sorted(missing - OPTIONAL_KEYS)
    measured = [key for key in KEYS if key in rounds]
    metrics = {key: median(rounds[key]) for key in measured}
    targets = [target.check(metrics) for target in TARGETS]
    document = document_head(
        size,
        "smoke run: reduced sizes on whatever machine this was; the numbers only show "
        "that the bench runs end to end. Do not commit this file.",
    )
    document.update(
        sizes=sizes,
        metrics={key: round(metrics[key], 3) for key in measured},
        not_measured=[key for key in KEYS if key not in rounds],
        targets=targets,
        all_targets_pass=all(t["pass"] for t in targets if t["pass"] is not None),
        rounds={key: [round(v, 3) for v in rounds[key]] for key in measured},
        **facts,
        rounds_detail=detail,
    )
    return document


def document_head(size: str, warning: str) -> dict[str, Any]:
    """A results document's first keys: its size, ``warning`` unless the size is full, when
    it was written and from which commit."""
    document: dict[str, Any] = {"size": size}
    if size != "full":
        document["warning"] = warning
    document.update(
        written_at=datetime.now(UTC).isoformat(timespec="seconds"),
        git=git_facts(),
    )
    return document


def write(document: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    replace_section(PERFORMANCE_DOC, BEGIN, END, markdown(document))


def replace_section(path: Path, begin: str, end: str, body: str) -> None:
    """Rewrite the text between the markers ``begin`` and ``end`` of ``path``, only that."""
    text = path.read_text(encoding="utf-8")
    if begin not in text or end not in text:
        raise SystemExit(f"{path} has lost its {begin} … {end} markers")
    head, rest = text.split(begin, 1)
    _old, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{body}{end}{tail}", encoding="utf-8")


def git_facts() -> dict[str, Any]:
    def git(*args: str) -> str:
        result = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        )
        return result.stdout.strip()

    # What the bench itself writes does not make the tree dirty.
    ours = ("bench/results/", "docs/performance.md", "docs/images/performance.svg")
    changes = [
        line for line in git("status", "--porcelain").splitlines() if not line[3:].startswith(ours)
    ]
    return {
        "commit": git("rev-parse", "HEAD"),
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": bool(changes),
    }


def machine_facts() -> dict[str, Any]:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gb": round(memory / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


# -- rendering --------------------------------------------------------------------------------


def _number(key: str, value: float) -> str:
    if key.startswith("mails_"):
        return f"{value:.0f}"
    if "ratio" in key or "scaling" in key:
        return f"{value:.2f}"
    if key.startswith("poll_ms"):
        return f"{value:.3f}"
    return f"{value:.1f}"


def _rows(document: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(key, value, each round's value, target, pass/FAIL) per key, then the RSS target."""
    by_name = {t["name"]: t for t in document["targets"]}

    def verdict(name: str) -> tuple[str, str]:
        target = by_name.get(name)
        if target is None:
            return "", ""
        found = {True: "pass", False: "FAIL", None: "not measured"}[target["pass"]]
        return f"{target['op']} {target['threshold']}", found

    rows = []
    for key in KEYS:
        if key not in document["metrics"]:
            rows.append((key, "not measured", "", *verdict(key)))
            continue
        per_round = document["rounds"][key]
        spread = ", ".join(_number(key, v) for v in per_round) if len(per_round) > 1 else ""
        rows.append((key, _number(key, document["metrics"][key]), spread, *verdict(key)))
    for name, target in by_name.items():
        if name not in KEYS:
            rows.append((name, _number(name, target["value"]), "", *verdict(name)))
    return rows


def run_text(document: dict[str, Any]) -> str:
    """When and from which commit: how the "Run" line of the facts starts."""
    git = document["git"]
    return (
        f"{document['written_at']}, commit `{git['commit'][:10]}`"
        f"{' with uncommitted changes' if git['dirty'] else ''} ({git['branch']})"
    )


def machine_text(document: dict[str, Any]) -> str:
    """The "Machine" line of the facts."""
    machine = document["machine"]
    load = machine["load_average_before"][0], machine["load_average_after"][0]
    return (
        f"{machine['cores']} cores ({machine['cpu']}), {machine['memory_gb']} GB, "
        f"Python {machine['python']}, Django {document['django']}; "
        f"1-minute load average {load[0]} before, {load[1]} after"
    )


def _facts(document: dict[str, Any]) -> list[tuple[str, str]]:
    pg, sizes = document["postgresql"], document["sizes"]
    return [
        (
            "Run",
            f"{run_text(document)}, {document['size']} size, {sizes['rounds']} rounds, "
            f"batch size {document['batch_size']}, {document['duration_s']:.0f} s",
        ),
        ("Machine", machine_text(document)),
        (
            "PostgreSQL",
            f"{pg['server_version']}, synchronous_commit={pg['synchronous_commit']}, "
            f"fsync={pg['fsync']}; a one-row commit takes {pg['commit_ms']} ms "
            f"({pg['commit_ms_without_flush']} ms without waiting for the flush)",
        ),
        ("MariaDB", _mariadb_text(document.get("rounds_detail", {}).get("mariadb_drain", {}))),
        ("Web", _web_text(document.get("rounds_detail", {}).get("web", {}))),
        (
            "Sizes",
            f"{sizes['events']} start events per step run ({sizes['sqlite_events']} on "
            f"SQLite); {sizes['timers']} reminders per drain run; poll tables of "
            f"{sizes['poll_small']} and {sizes['poll_large']} pending timers, "
            f"{sizes['poll_reps']} claims per table per round; RSS after {sizes['rss_small']} "
            f"and {sizes['rss_large']} reminders; {sizes['slow_timers']} invoice reminders "
            f"per slow-receiver run; {sizes['web_requests']} requests per web run",
        ),
    ]


def _mariadb_text(found: dict[str, Any]) -> str:
    """The "MariaDB" line of the facts: its server, or why it was not measured."""
    if "server" not in found:
        return f"not measured: {found.get('unavailable', 'not run')}"
    server = found["server"]
    return (
        f"{server['version']}, innodb_flush_log_at_trx_commit="
        f"{server['innodb_flush_log_at_trx_commit']}, sync_binlog={server['sync_binlog']}, "
        f"{server['isolation']}; a one-row commit takes {server['commit_ms']} ms"
    )


def _web_text(found: dict[str, Any]) -> str:
    """The "Web" line of the facts: how the web pair was served and loaded, or why not."""
    if "unavailable" in found or "clients" not in found:
        return f"not measured: {found.get('unavailable', 'not run')}"
    return (
        f"gunicorn {found['gunicorn']} with {found['gunicorn_sync_workers']} sync workers, "
        f"CONN_MAX_AGE={found['conn_max_age_s']}; {found['load_generator']}, "
        f"{found['clients']} clients, {found['requests_per_run']} requests per run"
    )


_UNITS = {
    "publish_start_event": "a start event, `publish()`",
    "start_by_hand": "a start event, by hand",
    "fire_timer_drain_due": "a fired reminder, `drain_due()`",
    "fire_timer_by_hand": "a fired reminder, by hand",
}


def markdown(document: dict[str, Any]) -> str:
    lines = []
    if document["size"] != "full":
        lines += [
            "> **Smoke run, not a measurement.** Reduced sizes on a possibly busy machine: this",
            "> section only shows that the bench runs. Run `make bench` at full size on a quiet",
            "> machine before reading anything into it, and do not commit it.",
            "",
        ]
    lines += ["| key | value | rounds | target | |", "| --- | ---: | --- | --- | --- |"]
    lines += [f"| `{k}` | {v} | {r} | {t} | {p} |" for k, v, r, t, p in _rows(document)]
    lines += [""] + [f"- **{label}**: {text}." for label, text in _facts(document)]
    lines += [
        "",
        "Statements and transactions per unit of work (counted, not timed; a transaction is",
        "a commit, or a statement sent outside any `atomic()`):",
        "",
        "| per | statements | transactions | by kind |",
        "| --- | ---: | ---: | --- |",
    ]
    for label, counted in document["statements"].items():
        kinds = ", ".join(f"{kind} {n:g}" for kind, n in counted["by_kind"].items())
        lines.append(
            f"| {_UNITS.get(label, label)} | {counted['statements']:.2f} | "
            f"{counted['transactions']:.3f} | {kinds} |"
        )
    return "\n".join(lines) + "\n"


def summary(document: dict[str, Any]) -> str:
    out = []
    if document["size"] != "full":
        out += ["SMOKE RUN (reduced sizes): the numbers only show that the bench runs.", ""]
    out += text_table([("key", "value", "rounds", "target", ""), *_rows(document)], right={1})
    out += [""] + [f"{label}: {text.replace('`', '')}" for label, text in _facts(document)]
    verdicts = [t["pass"] for t in document["targets"]]
    passed, measured = verdicts.count(True), len(verdicts) - verdicts.count(None)
    unmeasured = f", {len(verdicts) - measured} not measured" if measured < len(verdicts) else ""
    out += [
        "",
        f"targets: {passed} of {measured} met{unmeasured}; wrote "
        f"{RESULTS.relative_to(ROOT)} and {PERFORMANCE_DOC.relative_to(ROOT)}",
    ]
    return "\n".join(out)


def text_table(rows: Sequence[Sequence[str]], *, right: Container[int]) -> list[str]:
    """``rows`` (the first is the header, ruled off) in aligned columns; the columns whose
    numbers are in ``right`` are aligned right, the others left."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for number, row in enumerate(rows):
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if number == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines
