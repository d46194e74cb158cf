"""Parent side of the multi-process timer tests: start, watch and reap child processes.

Children write stdout and stderr to files (no pipe can fill up and block them), every
wait has a timeout, and ``supervised()`` kills whatever is still running when the test
ends, however it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKERS = Path(__file__).resolve().parents[1] / "workers"
ROOT = WORKERS.parent.parent


@dataclass
class Child:
    """One child process and the files its output goes to."""

    name: str
    process: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path
    _status: int | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float) -> int:
        """Wait for the exit (bounded) and return the return code (-9: SIGKILLed)."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} (pid {self.pid}) still running after {timeout}s\n{self.stderr()}"
            ) from None

    def report(self, timeout: float = 60) -> dict[str, Any]:
        """Wait for a clean exit and return the JSON line the child printed last."""
        code = self.wait(timeout)
        assert code == 0, f"{self.name} exited with {code}\n{self.stderr()}"
        lines = self.stdout_path.read_text().strip().splitlines()
        assert lines, f"{self.name} printed nothing\n{self.stderr()}"
        result: dict[str, Any] = json.loads(lines[-1])
        return result

    def stderr(self) -> str:
        text = self.stderr_path.read_text() if self.stderr_path.exists() else ""
        return f"--- stderr of {self.name} (last 4000 chars) ---\n{text[-4000:]}"

    def wait_until_stopped(self, timeout: float) -> None:
        """Wait (bounded) until the child stopped itself with SIGSTOP."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED)
            if pid and os.WIFSTOPPED(status):
                return
            if pid:
                # It exited instead; hand the status back to Popen so wait() reports it.
                self.process.returncode = os.waitstatus_to_exitcode(status)
                raise AssertionError(
                    f"{self.name} exited ({self.process.returncode}) instead of stopping\n"
                    f"{self.stderr()}"
                )
            time.sleep(0.01)
        raise AssertionError(f"{self.name} did not stop within {timeout}s\n{self.stderr()}")


class Supervisor:
    """Starts children into ``workdir``; see ``supervised()``."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.env = env
        self.workdir = workdir
        self.children: list[Child] = []

    def spawn(self, script: str, *args: str, name: str, env: dict[str, str] | None = None) -> Child:
        """Run ``tests/workers/<script>`` with ``args`` in a fresh Python process."""
        stdout_path = self.workdir / f"{name}.out"
        stderr_path = self.workdir / f"{name}.err"
        with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, str(WORKERS / script), *args],
                env={**self.env, **(env or {})},
                cwd=ROOT,
                stdout=out,
                stderr=err,
            )
        child = Child(name, process, stdout_path, stderr_path)
        self.children.append(child)
        return child

    def release_together(self, children: list[Child], timeout: float = 60) -> None:
        """Wait (bounded) until every child is set up, then let them all go at once."""
        ready = [self.workdir / f"{child.name}.ready" for child in children]
        deadline = time.monotonic() + timeout
        while not all(path.exists() for path in ready):
            for child in children:
                if child.process.poll() is not None:
                    raise AssertionError(f"{child.name} died during setup\n{child.stderr()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"children not ready within {timeout}s")
            time.sleep(0.02)
        self.go_file.touch()

    @property
    def go_file(self) -> Path:
        return self.workdir / "go"

    def barrier_args(self, name: str) -> list[str]:
        """Arguments that make a child wait for ``release_together()``."""
        return ["--ready-file", str(self.workdir / f"{name}.ready"), "--go-file", str(self.go_file)]

    def kill_all(self) -> None:
        for child in self.children:
            if child.process.poll() is None:
                # SIGKILL also ends a stopped process.
                child.process.send_signal(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.process.wait(timeout=10)


@contextmanager
def supervised(env: dict[str, str], workdir: Path) -> Iterator[Supervisor]:
    """Yield a ``Supervisor``; every child still running at the end is killed."""
    supervisor = Supervisor(env, workdir)
    try:
        yield supervisor
    finally:
        supervisor.kill_all()
