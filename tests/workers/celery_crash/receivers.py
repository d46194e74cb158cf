"""The fault point: a receiver that SIGKILLs the worker the first time it sees its event.

Configured through the worker's environment (see ``CrashPlan`` in test_celery_faults.py):

- ``BSFT_SAGA_CRASH_EVENT``: the event type to die on (other events pass untouched);
- ``BSFT_SAGA_CRASH_TASK``: the Celery task it must be running in to die;
- ``BSFT_SAGA_CRASH_KILL``: ``process`` kills the process running the task (a prefork
  pool's child, whose parent survives), ``worker`` the worker's whole process group
  (parent, pool children and embedded beat: a machine or container lost);
- ``BSFT_SAGA_CRASH_DIR``: where it writes ``seen`` (one JSON line per call, before
  anything else) and ``killed`` (created exclusively right before the first kill: a later
  call, in a new child or a restarted worker, finds it and lets the event through). A
  write is in the page cache once ``os.write`` returns, so a SIGKILL cannot lose it; no
  fsync (which can take seconds on a busy disk, longer than the claim's lease).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from celery import current_task

from bsft_saga.events.envelope import Envelope

SEEN = "seen"
KILLED = "killed"


def crash_once(sender: type, *, envelope: Envelope, **kwargs: Any) -> None:
    if envelope.event_type != os.environ["BSFT_SAGA_CRASH_EVENT"]:
        return
    directory = Path(os.environ["BSFT_SAGA_CRASH_DIR"])
    request = current_task.request if current_task else None
    call = {
        "pid": os.getpid(),
        "task": current_task.name if current_task else None,
        "task_id": request.id if request else None,
        "message_id": str(envelope.message_id),
    }
    _append(directory / SEEN, json.dumps(call) + "\n")
    if call["task"] != os.environ["BSFT_SAGA_CRASH_TASK"]:
        return
    try:
        fd = os.open(directory / KILLED, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return  # killed once already: this run delivers
    try:
        os.write(fd, json.dumps(call).encode())
    finally:
        os.close(fd)
    if os.environ["BSFT_SAGA_CRASH_KILL"] == "worker":
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
