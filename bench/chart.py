"""The chart of docs/performance.md: what each way of doing the work manages a second.

    .venv/bin/python -m bench.chart   # redraw docs/images/performance.svg from latest.json

``make bench`` draws it after every run; this entry redraws it from the committed
bench/results/latest.json without measuring anything (after a full run made elsewhere, or a
change to the chart itself). Per workload, a panel of bars: the library, the hand-written
Django baseline, the raw per-row baseline and the raw set-based one (bench/baselines.py),
each bar with its value, the median of its rounds. A baseline a results file does not hold
(an older file, or one the bench does not measure) is drawn as "not measured".

The SVG is drawn by matplotlib (its svg backend, no pyplot state) on an opaque light card,
so that it reads the same on the documentation's light and dark pages; its text stays text,
and ids are salted with a constant and no date is written, so that redrawing the same file
gives the same bytes and a new run shows as a diff of its numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import StrMethodFormatter

from bench.measure import median
from bench.report import RESULTS, ROOT

CHART = ROOT / "docs" / "images" / "performance.svg"

#: The ways of doing the work, in the order of the bars, with their colours (Okabe and
#: Ito's, told apart with any colour vision).
BASELINES = (
    ("bsft_saga", "#0072B2"),
    ("hand-written Django", "#E69F00"),
    ("raw psycopg, a statement per row", "#009E73"),
    ("raw psycopg, set-based", "#CC79A7"),
)

Reading = Callable[[dict[str, Any]], float | None]


def _metric(key: str) -> Reading:
    return lambda document: document.get("metrics", {}).get(key)


def _detail(benchmark: str, runs: str, field: str | None = None) -> Reading:
    """The median of ``rounds_detail[benchmark][runs]`` (each run's ``field`` if given)."""

    def read(document: dict[str, Any]) -> float | None:
        found = document.get("rounds_detail", {}).get(benchmark, {}).get(runs)
        if not found:
            return None
        return median([run[field] if field else run for run in found])

    return read


@dataclass(frozen=True)
class Panel:
    """One workload: its title, its unit and how to read each baseline's rate."""

    title: str
    unit: str
    rates: tuple[Reading | None, ...]  # in the order of BASELINES; None: not measured


PANELS = (
    Panel(
        "Drain: workload W, one process",
        "reminders fired a second",
        (
            _metric("drain_timers_per_s_1p"),
            _detail("drain", "handwritten_1p", "timers_per_s"),
            _metric("drain_timers_per_s_raw_batch"),
            _metric("drain_timers_per_s_raw_set"),
        ),
    ),
    Panel(
        "Start events",
        "start events a second",
        (
            _metric("step_events_per_s"),
            _detail("step", "handwritten_events_per_s"),
            _metric("step_events_per_s_raw_row"),
            _metric("step_events_per_s_raw_set"),
        ),
    ),
)

INK, MUTED, CARD, WARNING = "#1f2328", "#59636e", "#ffffff", "#b3261e"


def rates(document: dict[str, Any]) -> list[list[float | None]]:
    """Each panel's rates, in the order of ``BASELINES`` (None: not measured)."""
    return [[read(document) if read else None for read in panel.rates] for panel in PANELS]


def draw(document: dict[str, Any], path: Path = CHART) -> Path:
    """Draw the chart of the results ``document`` (latest.json's content) into ``path``."""
    matplotlib.rcParams.update(
        {
            "svg.hashsalt": "bsft-saga-bench",  # the same ids for the same chart
            "svg.fonttype": "none",  # text as text: smaller, and no glyphs of this machine
            "font.family": "sans-serif",
            "font.size": 10,
            "text.color": INK,
            "axes.labelcolor": MUTED,
            "xtick.color": MUTED,
            "ytick.color": MUTED,
        }
    )
    figure = Figure(figsize=(9, 4.2), facecolor=CARD, edgecolor="#d0d7de", linewidth=1)
    axes_row = figure.subplots(1, len(PANELS))
    for axes, panel, values in zip(axes_row, PANELS, rates(document), strict=True):
        _draw_panel(axes, panel, values)
    figure.legend(
        handles=[Patch(color=colour, label=label) for label, colour in BASELINES],
        loc="lower center",
        ncol=len(BASELINES),
        frameon=False,
        fontsize=9,
    )
    figure.suptitle(_title(document), fontsize=11, color=INK)
    if document.get("size") != "full":
        figure.text(
            0.5,
            0.885,
            "smoke run: reduced sizes, not a measurement",
            ha="center",
            color=WARNING,
            fontsize=9,
        )
    figure.subplots_adjust(left=0.08, right=0.98, top=0.8, bottom=0.17, wspace=0.28)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="svg", metadata={"Date": None, "Creator": "bench/chart.py"})
    return path


def _draw_panel(axes: Axes, panel: Panel, values: list[float | None]) -> None:
    axes.set_facecolor(CARD)
    top = max((v for v in values if v is not None), default=1.0)
    for x, ((_, colour), value) in enumerate(zip(BASELINES, values, strict=True)):
        if value is None:
            axes.text(x, top * 0.02, "not\nmeasured", ha="center", va="bottom", color=MUTED)
            continue
        axes.bar(x, value, width=0.72, color=colour)
        axes.text(x, value + top * 0.015, f"{value:,.0f}", ha="center", va="bottom", color=INK)
    axes.set_title(panel.title, fontsize=10, color=INK)
    axes.set_ylabel(panel.unit)
    axes.set_xticks([])
    axes.set_xlim(-0.6, len(BASELINES) - 0.4)  # a place for every bar, measured or not
    axes.set_ylim(0, top * 1.12)
    axes.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    axes.grid(axis="y", color="#d0d7de", linewidth=0.6)
    axes.set_axisbelow(True)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        axes.spines[side].set_color("#8c959f")


def _title(document: dict[str, Any]) -> str:
    git = document.get("git", {})
    commit = git.get("commit", "")[:10]
    when = document.get("written_at", "")[:10]
    return f"make bench at {commit or 'an unknown commit'}, {when}: higher is faster"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="a latest.json")
    parser.add_argument("--output", type=Path, default=CHART, help="the SVG to write")
    args = parser.parse_args(argv)
    document = json.loads(args.results.read_text(encoding="utf-8"))
    print(f"drew {draw(document, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
