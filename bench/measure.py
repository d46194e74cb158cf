"""How runs are ordered and summarised, so that noise on a shared machine cancels.

A ratio compares two things measured in the same invocation, **interleaved**: round 1 runs
A then B, round 2 runs A then B, and so on (at least three rounds). A burst of load from
elsewhere then slows one A and one B instead of all the As, and the ratio is taken per
round (A_i / B_i, neighbours in time) before the median over rounds. Every reported value is the
median of its rounds; each round's value is kept in the results, to show the spread.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


def clock() -> float:
    """Seconds on the system-wide monotonic clock.

    CLOCK_MONOTONIC has one origin for every process of the machine, so a start taken in
    one child and a finish taken in another can be subtracted (``time.monotonic()`` makes
    no such promise on every platform).
    """
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def per_round_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """``a[i] / b[i]`` for every round ``i``: the ratio between neighbours in time."""
    return [x / y for x, y in zip(a, b, strict=True)]


def interleave(rounds: int, runs: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Call every run once per round, in the order given; return each run's values."""
    values: dict[str, list[float]] = {name: [] for name in runs}
    for number in range(1, rounds + 1):
        for name, run in runs.items():
            value = run()
            values[name].append(value)
            progress(f"round {number}/{rounds}  {name:<34} {value:>12.2f}")
    return values


def progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Measured:
    """What one benchmark found: each of its result keys' value in every round, and the
    raw runs behind them. A key's reported value is the median of its rounds."""

    rounds: dict[str, list[float]]
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def metrics(self) -> dict[str, float]:
        return {key: median(values) for key, values in self.rounds.items()}
