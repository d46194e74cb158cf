"""A progress line for the long commands, drawn on a terminal only.

``purge_saga_data``, ``erase_saga_data`` and the requeues of dead letters can work for
minutes (a million inbox rows take more than one). On a terminal, and at verbosity 1 or
more, they show one line that is rewritten after each batch: how many rows so far, at what
rate, how many remain. The line is wiped before the command writes its own output, which is
therefore the same as without it; when stdout is not a terminal (a pipe, a file, cron) or
with ``-v 0`` nothing is drawn at all. Use it around the service call::

    with progress_line(self, options, "rows deleted") as progress:
        report = apply_policy(policy, progress=progress)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.core.management.base import BaseCommand, OutputWrapper

from bsft_saga.progress import Progress

__all__ = ["ProgressLine", "progress_line"]

#: Erase from the cursor to the end of the line (what a shorter line leaves behind).
_CLEAR_LINE = "\x1b[K"


class ProgressLine:
    """``progress(done, total)`` drawn as one line, rewritten in place: the
    :data:`~bsft_saga.progress.Progress` callback of a command on a terminal."""

    def __init__(
        self, out: OutputWrapper, what: str, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.out = out
        self.what = what
        self.clock = clock
        self.started = clock()
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        total = max(total, done)  # counted before the work began: rows may have come since
        parts = [f"{done:,} of {total:,} {self.what}"]
        elapsed = self.clock() - self.started
        if done and elapsed > 0:
            parts.append(f"{done / elapsed:,.0f}/s")
        parts.append(f"{total - done:,} left")
        self.out.write(f"\r{', '.join(parts)}{_CLEAR_LINE}", ending="")
        self.out.flush()
        self.drawn = True

    def wipe(self) -> None:
        """Erase the line, so that what the command writes next starts a clean line."""
        if self.drawn:
            self.out.write(f"\r{_CLEAR_LINE}", ending="")
            self.out.flush()
            self.drawn = False


@contextmanager
def progress_line(
    command: BaseCommand, options: Mapping[str, Any], what: str
) -> Iterator[Progress | None]:
    """A :class:`ProgressLine` on the command's stdout, wiped on the way out (an error
    included); ``None`` (no progress asked of the service) off a terminal or at ``-v 0``.

    ``what`` names the rows and what happens to them: ``"rows deleted"``,
    ``"timers requeued"``.
    """
    if int(options["verbosity"]) < 1 or not command.stdout.isatty():
        yield None
        return
    line = ProgressLine(command.stdout, what)
    try:
        yield line
    finally:
        line.wipe()
