"""A logging handler that keeps the records it sees, through ``SagaContextFilter``."""

from __future__ import annotations

import logging

from bsft_saga.logging import SagaContextFilter


class Collected(logging.Handler):
    """Keeps every record (DEBUG and up) in ``records``, annotated by the filter."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.addFilter(SagaContextFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
