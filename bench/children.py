"""Parent side of the child processes: start them, release them together, read their reports.

Every drain runs in a fresh child (``python -m bench.child``), as a dispatcher does in
production, so that one run's caches, connections and memory never carry into the next.
A child sets Django up, connects, touches its ready file and waits for the go file: its
start-up is never timed. Its report is the last JSON line it prints; its stderr goes to a
file that is shown if it fails. ``Children`` kills whatever is still running when it closes.

``make soak`` also runs the real dispatcher command this way (``module="django"``:
``python -m django drain_saga_timeouts --loop``), and stops it as an operator would, with
SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def child_environment(database_url: str) -> dict[str, str]:
    """The environment of a child on ``database_url``, with the test app's settings."""
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    env["DATABASE_URL"] = database_url
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


class Child:
    """One ``python -m bench.child`` process."""

    def __init__(
        self,
        name: str,
        args: list[str],
        env: dict[str, str],
        workdir: Path,
        *,
        go_file: Path | None = None,
        interactive: bool = False,
        module: str = "bench.child",
    ) -> None:
        self.name = name
        self.stdout_path = workdir / f"{name}.out"
        self.stderr_path = workdir / f"{name}.err"
        self.ready_file = workdir / f"{name}.ready"
        self.ready_file.unlink(missing_ok=True)  # left by an earlier run of the same name
        if go_file is not None:
            args = [*args, "--ready-file", str(self.ready_file), "--go-file", str(go_file)]
        # An interactive child answers on a pipe; the others write to a file, so that no
        # pipe can fill up and block them.
        with self.stderr_path.open("wb") as err, self.stdout_path.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                env=env,
                cwd=ROOT,
                stdin=subprocess.PIPE if interactive else subprocess.DEVNULL,
                stdout=subprocess.PIPE if interactive else out,
                stderr=err,
                text=interactive,
            )

    def report(self, timeout: float) -> dict[str, Any]:
        """Wait for a clean exit; return the JSON line it printed last."""
        result: dict[str, Any] = json.loads(
            self._last_line(timeout, f"still running after {timeout}s")
        )
        return result

    def ask(self, request: str) -> dict[str, Any]:
        """Send one line to an interactive child and return its one-line JSON answer."""
        assert self.process.stdin is not None
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()
        return self.read()

    def read(self) -> dict[str, Any]:
        """The next JSON line an interactive child prints (it blocks until there is one)."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait(timeout=60)
            raise RuntimeError(f"{self.name} exited with {code}{self._stderr()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    @property
    def pid(self) -> int:
        return self.process.pid

    def check_alive(self) -> None:
        """Raise (with its stderr) if the child has exited."""
        code = self.process.poll()
        if code is not None:
            raise RuntimeError(f"{self.name} exited with {code}{self._stderr()}")

    def stop(self, timeout: float) -> str:
        """SIGTERM, wait for a clean exit, return the last line it printed."""
        self.check_alive()
        self.process.send_signal(signal.SIGTERM)
        return self._last_line(timeout, f"still running {timeout}s after SIGTERM")

    def _last_line(self, timeout: float, still_running: str) -> str:
        """Wait for a clean exit; return the last line it printed (``still_running`` says
        what the error says if it does not exit within ``timeout``)."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{self.name} {still_running}{self._stderr()}") from None
        lines = self.stdout_path.read_text().strip().splitlines()
        if code != 0 or not lines:
            raise RuntimeError(f"{self.name} exited with {code}{self._stderr()}")
        return lines[-1]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def _stderr(self) -> str:
        text = self.stderr_path.read_text() if self.stderr_path.exists() else ""
        return f"\n--- stderr of {self.name} (last 4000 characters) ---\n{text[-4000:]}"


class Children:
    """The children of one benchmark; a context manager that kills the survivors."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env = env
        self.started: list[Child] = []
        self.go_file = workdir / "go"

    def __enter__(self) -> Children:
        self.go_file.unlink(missing_ok=True)
        return self

    def __exit__(self, *exc: object) -> None:
        for child in self.started:
            child.kill()

    def spawn(
        self,
        name: str,
        *args: str,
        barrier: bool = True,
        interactive: bool = False,
        env: dict[str, str] | None = None,
        module: str = "bench.child",
    ) -> Child:
        """Start ``python -m bench.child <args>``; with ``barrier``, it waits for ``release()``.

        ``env`` replaces the children's environment for this one (another database);
        ``module`` runs another module instead (then without ``barrier``).
        """
        child = Child(
            name,
            list(args),
            env or self.env,
            self.workdir,
            go_file=self.go_file if barrier else None,
            interactive=interactive,
            module=module,
        )
        self.started.append(child)
        return child

    def release(self, children: list[Child], timeout: float = 120) -> None:
        """Wait (bounded) until every child is ready, then let them all go at once."""
        deadline = time.monotonic() + timeout
        while not all(child.ready_file.exists() for child in children):
            for child in children:
                if child.process.poll() is not None:
                    raise RuntimeError(f"{child.name} died while setting up{child._stderr()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"children not ready within {timeout}s")
            time.sleep(0.01)
        self.go_file.touch()


def on_sqlite(workdir: Path, mode: str, *args: str, timeout: float, label: str) -> list[float]:
    """Run ``python -m bench.child <mode> <args>`` on a fresh SQLite file (deleted after)
    and return the rates it reports, one per round (``label`` names them in the progress)."""
    from bench import database
    from bench.measure import progress

    database.SQLITE_FILE.unlink(missing_ok=True)
    env = child_environment(f"sqlite:///{database.SQLITE_FILE}")
    try:
        with Children(workdir, env) as children:
            child = children.spawn(mode, mode, *args, barrier=False)
            rates: list[float] = child.report(timeout=timeout)["rates"]
    finally:
        database.SQLITE_FILE.unlink(missing_ok=True)
    for number, rate in enumerate(rates, 1):
        progress(f"round {number}/{len(rates)}  {label:<34} {rate:>12.2f}")
    return rates
