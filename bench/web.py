"""The web pair: a Django view that publishes a start event, served over HTTP, against a
view that writes the same rows by hand.

**Library**: ``POST /publish/`` calls ``publish()`` with the step benchmark's start event
(``workloads.start_event``; ``BenchReminderFlow``'s start step sets the state and schedules
one reminder), which commits the instance, its inbox row and the timer row.
**Hand-written**: ``POST /by-hand/`` writes the same three rows in one
``transaction.atomic()`` (``baselines.start_by_hand``). The views are in bench/webapp.py.

Both views are served by the same gunicorn, started once for the benchmark: 4 sync workers
(``--workers 4``), bound to 127.0.0.1 only, with tests/settings.py's apps and middleware
(bench/web_settings.py: ``DEBUG`` off, one persistent database connection per worker, as a
production deployment keeps). Each run is ``hey -n N -c 16``: 16 concurrent clients send N
requests in all over loopback (N rounded down to a multiple of 16, as hey shares them out)
and hey stops once every one is answered; its requests a second and its 99th percentile of
latency are the run's figures. Sync workers close the connection after each answer, so
every request connects anew, for both views alike.

What differs between the two runs is the view's body and nothing else: the same server,
workers, connections, middleware, request and answer (201, no body). So the ratio prices
in what ``publish()`` costs over the three hand-written INSERTs once a request's own costs
(the client, the socket, the WSGI call, Django's request handling) are paid on both sides,
which is what an application serving start events over HTTP would see.

The runs are interleaved over the bench's rounds (library, hand-written, library, ...),
after an untimed warm-up of each view (the workers import the views and connect), with
the saga tables emptied (untimed) before each run. After each run the bench counts the
sagas: there must be one for every request answered 2xx (``workloads.check_started``), or
the bench fails. A run in which hey saw an error or an answer other than 2xx reports no
figure: the five ``web_*`` keys are then left out, with the reason.

hey is Debian's (``apt-get install hey``), and gunicorn comes with the dev extra. A request
count rather than a duration (wrk's way) makes the check exact: a load generator that stops
at a deadline abandons the requests still in flight, whose sagas the server commits all the
same. Without hey or gunicorn the bench says how to install it and goes on without the web
keys; their target is then "not measured", neither met nor failed.

    BENCH_SIZE=smoke .venv/bin/python -m bench.web   # this benchmark alone

prints each round on stderr and its findings as one JSON line on stdout, and writes nothing
else: neither bench/results/latest.json nor docs/performance.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from bench import config as bench_config
from bench import database
from bench.children import ROOT, child_environment
from bench.config import Config
from bench.measure import Measured, interleave, median, per_round_ratios, progress

CLIENTS = 16  # concurrent clients of every run
WORKERS = 4  # gunicorn's sync workers
WARM_UP_REQUESTS = 10 * CLIENTS  # per view, untimed, before the first round
CONN_MAX_AGE_S = 600  # bench/web_settings.py's, reported with the results
PUBLISH_PATH, BY_HAND_PATH, READY_PATH = "/publish/", "/by-hand/", "/ready/"
#: How to get what the web pair needs, when it is missing.
HEY_HINT = "apt-get install hey (Debian's package; the bench's load generator)"
GUNICORN_HINT = "pip install -e '.[dev]' (gunicorn is in the dev extra)"
MIN_RATE = 10  # requests a second below which a run is taken to hang


class RunFailed(Exception):
    """A run answered with an error or a status other than 2xx: it reports no figure."""


@dataclass(frozen=True)
class Load:
    """What one hey run found."""

    requests: int  # sent
    requests_per_s: float  # hey's "Requests/sec": requests over the run's duration
    p99_ms: float | None  # hey's 99th percentile of the requests' latency, to 0.1 ms
    statuses: dict[str, int]  # answers per HTTP status
    errors: dict[str, int]  # requests without an answer (refused, timed out, ...) per reason

    @property
    def answered_2xx(self) -> int:
        return sum(n for status, n in self.statuses.items() if status.startswith("2"))

    def failure(self) -> str | None:
        """Why this run reports no figure, or None."""
        wrong = {status: n for status, n in self.statuses.items() if not status.startswith("2")}
        unanswered = self.requests - sum(self.statuses.values())
        found = [
            *([f"{unanswered} of {self.requests} requests unanswered"] if unanswered else []),
            *([f"errors {self.errors}"] if self.errors else []),
            *([f"answers other than 2xx {wrong}"] if wrong else []),
            *(["no latency reported"] if self.p99_ms is None else []),
        ]
        return "; ".join(found) or None


def parse_hey(text: str, requests: int) -> Load:
    """hey's summary of a run of ``requests`` requests (its output without ``-o csv``)."""
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", text)
    p99 = re.search(r"99% in ([0-9.]+) secs", text)
    statuses = dict(re.findall(r"^\s+\[(\d{3})\]\s+(\d+) responses", text, re.MULTILINE))
    errors_part = text.split("Error distribution:", 1)[1] if "Error distribution:" in text else ""
    errors = re.findall(r"^\s+\[(\d+)\]\s+(.+)$", errors_part, re.MULTILINE)
    return Load(
        requests=requests,
        requests_per_s=float(rate.group(1)) if rate else 0.0,
        p99_ms=round(float(p99.group(1)) * 1000, 1) if p99 else None,
        statuses={status: int(n) for status, n in statuses.items()},
        errors={reason.strip(): int(n) for n, reason in errors},
    )


def unavailable() -> str | None:
    """Why the web pair cannot be measured here (no hey, no gunicorn), or None."""
    if shutil.which("hey") is None:
        return f"hey is not installed: {HEY_HINT}"
    if importlib.util.find_spec("gunicorn") is None:
        return f"gunicorn is not installed: {GUNICORN_HINT}"
    return None


class Server:
    """gunicorn serving bench/webapp.py on a free port of 127.0.0.1, for a ``with`` block."""

    def __init__(self, config: Config, workdir: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "gunicorn.err"
        env = child_environment(config.database_url())  # the bench's own database
        env["DJANGO_SETTINGS_MODULE"] = "bench.web_settings"
        with self.log.open("wb") as err:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gunicorn",
                    "--workers",
                    str(WORKERS),
                    "--worker-class",
                    "sync",
                    "--bind",
                    f"127.0.0.1:{self.port}",
                    "django.core.wsgi:get_wsgi_application()",
                ],
                env=env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.process.returncode}{self.stderr()}")
            try:
                with urllib.request.urlopen(self.url + READY_PATH, timeout=5) as answer:
                    if answer.status == 204:
                        return self
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"gunicorn did not answer within 60 s{self.stderr()}")
            time.sleep(0.2)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM (gunicorn's graceful stop), then SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)

    def stderr(self) -> str:
        text = self.log.read_text() if self.log.exists() else ""
        return f"\n--- gunicorn's stderr (last 4000 characters) ---\n{text[-4000:]}"

    def load(self, path: str, requests: int) -> Load:
        """``requests`` POSTs to ``path`` from ``CLIENTS`` concurrent clients, by hey."""
        requests -= requests % CLIENTS
        command = [
            "hey",
            "-n",
            str(requests),
            "-c",
            str(CLIENTS),
            "-m",
            "POST",
            "-t",
            "30",
            "-disable-redirects",  # a 3xx is an answer of its own, not a 2xx after it
            self.url + path,
        ]
        finished = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=60 + requests / MIN_RATE,
            check=False,
        )
        if finished.returncode != 0:
            raise RuntimeError(f"hey exited with {finished.returncode}: {finished.stderr}")
        return parse_hey(finished.stdout, requests)


def run(config: Config, workdir: Path) -> Measured:
    """Measure the web pair; no keys when hey or gunicorn is missing, or a run failed.

    A run whose sagas do not match its 2xx answers fails ``make bench``
    (``workloads.WorkloadError``), as a drain that skipped work does.
    """
    from bench import workloads  # its models need Django set up

    missing = unavailable()
    if missing is not None:
        progress(f"web pair not measured: {missing}")
        return Measured(rounds={}, detail={"unavailable": missing})
    n = config.sizes.web_requests
    runs: dict[str, list[Load]] = {"library": [], "handwritten": []}
    p99_ms: dict[str, list[float]] = {"library": [], "handwritten": []}

    def timed(server: Server, path: str, side: str, requests: int = n) -> float:
        database.reset_saga_tables()
        found = server.load(path, requests)
        runs[side].append(found)
        failure = found.failure()
        if failure is not None:
            raise RunFailed(f"{side}, {path}: {failure}")
        workloads.check_started(found.answered_2xx)
        assert found.p99_ms is not None  # failure() said so
        p99_ms[side].append(found.p99_ms)
        return found.requests_per_s

    facts = {
        "requests_per_run": n - n % CLIENTS,
        "clients": CLIENTS,
        "gunicorn_sync_workers": WORKERS,
        "conn_max_age_s": CONN_MAX_AGE_S,
        "load_generator": f"hey {_debian_version('hey')}".strip(),
        "gunicorn": _gunicorn_version(),
    }
    try:
        with Server(config, workdir) as server:
            progress(f"web pair: gunicorn on {server.url}, warming both views up")
            for path, side in ((PUBLISH_PATH, "library"), (BY_HAND_PATH, "handwritten")):
                timed(server, path, side, WARM_UP_REQUESTS)
                runs[side].clear()
                p99_ms[side].clear()
            values = interleave(
                config.sizes.rounds,
                {
                    "web: publish() view": lambda: timed(server, PUBLISH_PATH, "library"),
                    "web: three INSERTs by hand view": lambda: timed(
                        server, BY_HAND_PATH, "handwritten"
                    ),
                },
            )
    except RunFailed as exc:
        progress(f"web pair not measured: {exc}")
        return Measured(
            rounds={},
            detail={"unavailable": f"a run failed: {exc}", **facts, **_runs_detail(runs)},
        )
    finally:
        database.reset_saga_tables()
    library, by_hand = values.values()
    return Measured(
        rounds={
            "web_publish_requests_per_s": library,
            "web_handwritten_requests_per_s": by_hand,
            "web_publish_ratio_vs_handwritten": per_round_ratios(library, by_hand),
            "web_publish_p99_ms": p99_ms["library"],
            "web_handwritten_p99_ms": p99_ms["handwritten"],
        },
        detail={**facts, **_runs_detail(runs)},
    )


def _runs_detail(runs: dict[str, list[Load]]) -> dict[str, Any]:
    return {f"{side}_runs": [asdict(load) for load in loads] for side, loads in runs.items()}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _debian_version(package: str) -> str:
    found = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() if found.returncode == 0 else ""


def _gunicorn_version() -> str:
    from importlib.metadata import version

    return version("gunicorn")


def main() -> int:
    """Run the web pair alone on the bench's database and print what it found."""
    config = bench_config.from_environment()
    database.ensure_database(config, config.database)
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["DATABASE_URL"] = config.database_url()  # never a test database
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    with tempfile.TemporaryDirectory(prefix="bsft-saga-bench-web-") as tmp:
        measured = run(config, Path(tmp))
    for key, values in measured.rounds.items():
        progress(f"{key:<34} {median(values):>12.2f}  rounds {[round(v, 2) for v in values]}")
    print(json.dumps({"rounds": measured.rounds, "detail": measured.detail}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
