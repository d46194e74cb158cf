"""``make soak``'s results: bench/results/soak.json, the soak section of docs/performance.md
and the summary on stdout.

Drift is read as **first minute against last minute** of each series: the median of the
samples taken in the phase's first 60 s (after the one at 0 s, taken before the first
event) against the median of those in its last 60 s (the same load, so a difference is
the tables, the indexes or the processes changing).
Only the text between ``<!-- soak:results -->`` and ``<!-- /soak:results -->`` is
rewritten; ``make bench``'s section and the narrative are left alone. A run shorter than
the full one says so everywhere it writes (``"size": "short"``).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from typing import Any

from bench.config import SoakConfig
from bench.report import (
    PERFORMANCE_DOC,
    ROOT,
    document_head,
    machine_text,
    replace_section,
    run_text,
    text_table,
)

RESULTS = ROOT / "bench" / "results" / "soak.json"
BEGIN, END = "<!-- soak:results -->", "<!-- /soak:results -->"
MINUTE_S = 60.0
MB = 2**20

Getter = Callable[[dict[str, Any]], float | None]


def _table(table: str, column: str, scale: float = 1) -> Getter:
    def get(sample: dict[str, Any]) -> float | None:
        value = sample["tables"].get(table, {}).get(column)
        return None if value is None else value / scale

    return get


def _index(name: str) -> Getter:
    return lambda s: s["timer_indexes_bytes"].get(name, 0) / MB


# (key, what it is, how to read one sample). In the order the tables list them.
SERIES: tuple[tuple[str, str, Getter], ...] = (
    ("lateness_p50_ms", "fire lateness p50 (ms)", lambda s: s["lateness"]["p50_ms"]),
    ("lateness_p99_ms", "fire lateness p99 (ms)", lambda s: s["lateness"]["p99_ms"]),
    ("claim_ms", "claim, median (ms)", lambda s: s["claim"]["ms"]),
    ("claim_server_ms", "claim SELECT on the server (ms)", lambda s: s["claim"]["server_ms"]),
    ("claim_buffers", "claim SELECT buffers", lambda s: s["claim"]["buffers"]),
    ("due", "due timers not fired yet", lambda s: s["due"]),
    ("timer_live_tup", "timer live tuples", _table("timer", "n_live_tup")),
    ("timer_dead_tup", "timer dead tuples", _table("timer", "n_dead_tup")),
    ("timer_heap_mb", "timer heap (MB)", _table("timer", "heap_bytes", MB)),
    ("timer_index_mb", "timer indexes (MB)", _table("timer", "index_bytes", MB)),
    ("timer_ready_idx_mb", "timer ready index (MB)", _index("bsft_saga_timeout_ready_idx")),
    ("timer_due_idx_mb", "timer due index (MB)", _index("bsft_saga_timeout_due_idx")),
    ("inbox_dead_tup", "inbox dead tuples", _table("inbox", "n_dead_tup")),
    ("inbox_total_mb", "inbox total (MB)", _table("inbox", "total_bytes", MB)),
    ("instance_dead_tup", "instance dead tuples", _table("instance", "n_dead_tup")),
    ("instance_total_mb", "instance total (MB)", _table("instance", "total_bytes", MB)),
    ("xmin_age", "oldest snapshot's xmin age (xacts)", lambda s: s["xmin_age"]),
    ("rss_dispatcher_1_mb", "dispatcher-1 RSS (MB)", lambda s: s["rss_mb"]["dispatcher-1"]),
    ("rss_dispatcher_2_mb", "dispatcher-2 RSS (MB)", lambda s: s["rss_mb"]["dispatcher-2"]),
    ("rss_publisher_mb", "publisher RSS (MB)", lambda s: s["rss_mb"]["publisher"]),
)
TABLES = ("timer", "inbox", "instance")


def summarise(phase: dict[str, Any]) -> dict[str, Any]:
    """A phase's summary: each series' first and last minute, and the phase's totals."""
    samples = phase["samples"]
    loaded = [s for s in samples if s["t_s"] > 0] or samples  # 0 s: before the first event
    end = loaded[-1]["t_s"]
    first = [s for s in loaded if s["t_s"] <= MINUTE_S]
    last = [s for s in loaded if s["t_s"] >= end - MINUTE_S]
    series = {}
    for key, _label, get in SERIES:
        every = _values(samples, get)
        head, tail = _median(_values(first, get)), _median(_values(last, get))
        series[key] = {
            "first_minute": head,
            "last_minute": tail,
            "change": None if head is None or tail is None else _round(tail - head),
            "max": _round(max(every)) if every else None,
        }
    final = samples[-1]["tables"]
    totals, publisher = phase["totals"], phase["totals"]["publisher"]
    return {
        "series": series,
        "lateness_overall": totals["lateness"],
        "max_dead_tuples": {t: series[f"{t}_dead_tup"]["max"] for t in TABLES},
        "hot_update_share": {
            t: _share(final[t]["n_tup_hot_upd"], final[t]["n_tup_upd"]) for t in TABLES
        },
        "updates": {t: final[t]["n_tup_upd"] for t in TABLES},
        "vacuumed_by": totals["vacuumed_by"],
        "vacuum_runs": {t: final[t]["vacuum_count"] + final[t]["autovacuum_count"] for t in TABLES},
        "analyze_runs": {
            t: final[t]["analyze_count"] + final[t]["autoanalyze_count"] for t in TABLES
        },
        "rss_growth_mb": _rss_growth(samples),
        "claim_plans": _plans(samples),
        "published": publisher["published"],
        "events_per_s": _round(publisher["events_per_s"]),
        "publisher_max_behind_s": _round(publisher["max_behind_s"]),
        "drain_out_s": totals["drain_out_s"],
    }


def _plans(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The claim's plan shapes in the order they appeared, each with the first sample that
    had it: the planner switching plans (after an ANALYZE, as the tables grow) is drift too."""
    plans: list[dict[str, Any]] = []
    for sample in samples:
        plan = sample["claim"]["plan"]
        if not plans or plans[-1]["plan"] != plan:
            plans.append({"from_t_s": sample["t_s"], "plan": plan})
    return plans


def _rss_growth(samples: list[dict[str, Any]]) -> dict[str, float]:
    """Per child, RSS at its last sample minus RSS at the first one under load (not the 0 s
    one, taken before the first event: a process's first passes load code and warm caches).
    The publisher's last sample is the last one taken before it exited."""
    loaded = [s for s in samples if s["t_s"] > 0] or samples
    growth = {}
    for name in loaded[0]["rss_mb"]:
        values = [s["rss_mb"][name] for s in loaded if s["rss_mb"].get(name) is not None]
        if values:
            growth[name] = _round(values[-1] - values[0])
    return growth


def build(
    *,
    config: SoakConfig,
    settings: dict[str, Any],
    facts: dict[str, Any],
    phases: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """The document written to soak.json."""
    document = document_head(
        config.size,
        "short run: fewer minutes (or a lower rate) than the soak's 2 x 30 minutes at 40 "
        "events/s; it only shows that the soak runs end to end. Do not commit this file.",
    )
    document.update(
        settings=settings,
        **facts,
        phases={
            name: {
                "pinned": phase["pinned"],
                "problems": phase["problems"],
                "summary": summarise(phase),
                "totals": phase["totals"],
                "samples": phase["samples"],
            }
            for name, phase in phases.items()
        },
    )
    return document


def write(document: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")
    replace_section(PERFORMANCE_DOC, BEGIN, END, markdown(document))


# -- rendering --------------------------------------------------------------------------------


def _rows(document: dict[str, Any]) -> list[list[str]]:
    """Per series: its label, then first and last minute of each phase."""
    phases = document["phases"]
    rows = []
    for key, label, _get in SERIES:
        cells = [label]
        for phase in phases.values():
            found = phase["summary"]["series"][key]
            cells += [_text(found["first_minute"]), _text(found["last_minute"])]
        rows.append(cells)
    return rows


def _header(document: dict[str, Any]) -> list[str]:
    cells = ["series"]
    for name in document["phases"]:
        cells += [f"{name}: first min", f"{name}: last min"]
    return cells


def _phase_lines(name: str, phase: dict[str, Any]) -> list[str]:
    summary = phase["summary"]
    late = summary["lateness_overall"]
    pin = phase["totals"]["pin"]
    lines = [
        f"{name}: {summary['published']} sagas at {summary['events_per_s']} events/s "
        f"(publisher at most {summary['publisher_max_behind_s']} s behind); "
        f"{late['fired']} timers fired, late p50 {_text(late['p50_ms'])} ms, "
        f"p99 {_text(late['p99_ms'])} ms, max {_text(late['max_ms'])} ms; "
        f"backlog fired {_text(summary['drain_out_s'])} s after the load stopped",
        f"{name}: max dead tuples {_by_table(summary['max_dead_tuples'])}; HOT share of "
        f"updates {_by_table(summary['hot_update_share'])}; VACUUM runs "
        f"{_by_table(summary['vacuum_runs'])} (by {_VACUUMED_BY[summary['vacuumed_by']]}); "
        f"RSS growth (MB) {_by_table(summary['rss_growth_mb'])}",
    ]
    lines += [
        f"{name}: claim plan from {plan['from_t_s']:g} s: `{plan['plan']}`"
        for plan in summary["claim_plans"]
    ]
    if pin:
        age = pin["xmin_age_at_end"]
        lines.append(f"{name}: the pinned snapshot was {age} transactions old at the end")
    lines += [f"{name}: PROBLEM: {problem}" for problem in phase["problems"]]
    return lines


_VACUUMED_BY = {
    "autovacuum": "autovacuum",
    "stand-in": "the soak's stand-in for autovacuum, which is off on this server",
}


def _facts(document: dict[str, Any]) -> list[tuple[str, str]]:
    pg, settings = document["postgresql"], document["settings"]
    library = document["library_settings"]
    return [
        (
            "Run",
            f"{run_text(document)}, {document['size']}: {settings['minutes']:g} min a phase "
            f"at {settings['rate']:g} start events/s, reminders "
            f"{settings['min_delay_ms'] / 1000:g} to {settings['max_delay_ms'] / 1000:g} s "
            "ahead, a sample every "
            f"{settings['sample_s']:g} s, 2 dispatchers (POLL_INTERVAL "
            f"{library['poll_interval_s']:g} s, BATCH_SIZE {library['batch_size']}), "
            f"{document['duration_s']:.0f} s in all",
        ),
        ("Machine", machine_text(document)),
        (
            "PostgreSQL",
            f"{pg['server_version']}; autovacuum={pg['autovacuum']}, naptime "
            f"{pg['autovacuum_naptime']}, vacuum threshold {pg['autovacuum_vacuum_threshold']} "
            f"+ scale factor {pg['autovacuum_vacuum_scale_factor']}, cost limit "
            f"{pg['autovacuum_vacuum_cost_limit']}, cost delay "
            f"{pg['autovacuum_vacuum_cost_delay']}; table options "
            f"{_by_table({t: o for t, o in pg['reloptions'].items() if o}) or 'none'}",
        ),
    ]


def markdown(document: dict[str, Any]) -> str:
    lines = []
    if document["size"] != "full":
        lines += [
            "> **Short run, not a measurement.** Fewer minutes than the soak's 2 x 30: this",
            "> section only shows that `make soak` runs end to end. Do not commit it.",
            "",
        ]
    header = _header(document)
    lines += [
        "| " + " | ".join(header) + " |",
        "| --- |" + " ---: |" * (len(header) - 1),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in _rows(document)]
    lines += [""]
    for name, phase in document["phases"].items():
        lines += [f"- {line}." for line in _phase_lines(name, phase)]
    lines += [""] + [f"- **{label}**: {text}." for label, text in _facts(document)]
    return "\n".join(lines) + "\n"


def summary(document: dict[str, Any]) -> str:
    header = _header(document)
    out = []
    if document["size"] != "full":
        out += ["SHORT RUN: the numbers only show that the soak runs.", ""]
    out += text_table([header, *_rows(document)], right=range(1, len(header)))
    out.append("")
    for name, phase in document["phases"].items():
        out += _phase_lines(name, phase)
    out += [""] + [f"{label}: {text.replace('`', '')}" for label, text in _facts(document)]
    out += ["", f"wrote {RESULTS.relative_to(ROOT)} and {PERFORMANCE_DOC.relative_to(ROOT)}"]
    return "\n".join(out)


# -- numbers ----------------------------------------------------------------------------------


def _values(samples: list[dict[str, Any]], get: Getter) -> list[float]:
    return [v for v in (get(s) for s in samples) if v is not None]


def _median(values: list[float]) -> float | None:
    return _round(statistics.median(values)) if values else None


def _round(value: float) -> float:
    return round(float(value), 3)


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def _text(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def _by_table(values: dict[str, Any]) -> str:
    return ", ".join(
        f"{name} {_text(v) if not isinstance(v, list) else v}" for name, v in values.items()
    )
