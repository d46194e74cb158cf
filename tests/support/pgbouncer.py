"""Run pytest through a PgBouncer in transaction mode that this script starts and stops.

``python -m tests.support.pgbouncer [pytest arguments]`` (``make test-pgbouncer``) writes a
PgBouncer configuration into a temporary directory, starts ``pgbouncer`` on a free port of
127.0.0.1 with ``pool_mode = transaction`` in front of the PostgreSQL server
(``--server-host``/``--server-port``), runs pytest with ``DATABASE_URL`` pointing at it, and
stops it again, however pytest ends. Child processes of the tests connect through it too:
``subprocess_env`` builds their ``DATABASE_URL`` from the test connection's settings.

The test database: pytest-django would drop it at the end through PgBouncer, and PostgreSQL
refuses ``DROP DATABASE`` while PgBouncer still keeps idle server connections to it in its
pool (for ``server_idle_timeout``, ten minutes by default). So pytest runs with
``--reuse-db`` (it creates the database through PgBouncer as usual, and migrates it), and
this script drops it on the server directly once PgBouncer is stopped — ``WITH (FORCE)``,
so that a backend still on its way out does not fail the drop. The name is this script's
own (``test_bsft_saga_pgbouncer_<pid>``), dropped before the run as well: ``--reuse-db``
never reuses anything left from an earlier run.

The tests read ``BSFT_SAGA_PGBOUNCER_PORT`` to reach PgBouncer's admin console
(``tests/processes/test_pgbouncer.py`` proves there that the suite's connections go through it).
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

#: The environment variable that tells the tests which port PgBouncer listens on.
PORT_VARIABLE = "BSFT_SAGA_PGBOUNCER_PORT"
ADMIN_DATABASE = "pgbouncer"
START_SECONDS = 15
STOP_SECONDS = 10

CONFIG = """\
[databases]
; Any database name the tests ask for (the maintenance database, the test database)
; is the server's database of that name.
* = host={server_host} port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
; TCP only: no socket file in a shared directory for two runs to fight over.
unix_socket_dir =
pool_mode = transaction
; No password, as on the server; trust still wants the user in auth_file (any would
; ignore the user name, and need a fixed user= on every database line).
auth_type = trust
auth_file = {auth_file}
admin_users = {user}
logfile = {logfile}
; After a failed login to the server (it is restarting), PgBouncer waits this long before
; it tries again: the default 15 s could outlast the few seconds tests/processes/test_failover.py
; gives the dispatcher to resume.
server_login_retry = 1
max_client_conn = 200
"""


def free_port() -> int:
    """Return a TCP port of 127.0.0.1 that nothing listens on right now."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def find_pgbouncer() -> str | None:
    """Return the ``pgbouncer`` executable (Debian installs it in /usr/sbin), or None."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")


def admin_connection(port: int, user: str, timeout: int = 2) -> psycopg.Connection[Any]:
    """Open a connection to PgBouncer's admin console (autocommit, simple query protocol).

    The console speaks only the simple query protocol, which psycopg uses for a
    ``ClientCursor`` statement without parameters.
    """
    import psycopg

    return psycopg.connect(
        host="127.0.0.1",
        port=port,
        user=user,
        dbname=ADMIN_DATABASE,
        autocommit=True,
        connect_timeout=timeout,
        cursor_factory=psycopg.ClientCursor,
    )


@contextmanager
def running_pgbouncer(
    executable: str, server_host: str, server_port: int, user: str
) -> Iterator[int]:
    """Start PgBouncer in front of the server, yield its port, and stop it on exit."""
    workdir = Path(tempfile.mkdtemp(prefix="bsft_saga_pgbouncer_"))
    port = free_port()
    logfile = workdir / "pgbouncer.log"
    auth_file = workdir / "userlist.txt"
    auth_file.write_text(f'"{user}" ""\n')
    config = workdir / "pgbouncer.ini"
    config.write_text(
        CONFIG.format(
            server_host=server_host,
            server_port=server_port,
            port=port,
            auth_file=auth_file,
            user=user,
            logfile=logfile,
        )
    )
    command = [executable, "-q", str(config)]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root; -u makes it switch to an unprivileged user,
        # who must be able to read the configuration and write the log.
        owner = _unprivileged_user()
        for path in (workdir, auth_file, config):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        command[1:1] = ["-u", owner.pw_name]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    try:
        _wait_until_listening(process, port, user, logfile)
        yield port
    finally:
        # An immediate shutdown that closes every connection (from 1.23 on, PgBouncer waits
        # for its clients instead; the wait below bounds that).
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_SECONDS)
        shutil.rmtree(workdir, ignore_errors=True)


def _unprivileged_user() -> pwd.struct_passwd:
    """The PostgreSQL server's own account where there is one, otherwise ``nobody``."""
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return pwd.getpwnam("nobody")


def _wait_until_listening(
    process: subprocess.Popen[bytes], port: int, user: str, log: Path
) -> None:
    import psycopg

    deadline = time.monotonic() + START_SECONDS
    while True:
        if process.poll() is not None:
            raise SystemExit(f"pgbouncer exited with {process.returncode}\n{_tail(log)}")
        try:
            admin_connection(port, user).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"pgbouncer not answering on 127.0.0.1:{port} after {START_SECONDS}s\n"
                    f"{_tail(log)}"
                ) from None
            time.sleep(0.1)


def _tail(log: Path) -> str:
    return log.read_text()[-4000:] if log.exists() else "(no pgbouncer log)"


def drop_database(server_host: str, server_port: int, user: str, name: str) -> None:
    """Drop ``name`` on the server itself (not through PgBouncer), if it exists."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(
        host=server_host, port=server_port, user=user, dbname="postgres", autocommit=True
    ) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--server-host", default="127.0.0.1")
    parser.add_argument("--server-port", type=int, default=5432)
    parser.add_argument("--user", default="postgres")
    parser.add_argument("--database", default="bsft_saga")
    parser.add_argument("--pgbouncer", default=None, help="the executable (default: on PATH)")
    args, pytest_args = parser.parse_known_args()

    executable = args.pgbouncer or find_pgbouncer()
    if executable is None:
        raise SystemExit("pgbouncer not found on PATH or in /usr/sbin (apt-get install pgbouncer)")
    test_database = f"test_bsft_saga_pgbouncer_{os.getpid()}"
    server = (args.server_host, args.server_port, args.user)
    drop_database(*server, test_database)
    try:
        with running_pgbouncer(executable, *server) as port:
            env = {
                **os.environ,
                "DATABASE_URL": f"postgres://{args.user}@127.0.0.1:{port}/{args.database}",
                "BSFT_SAGA_PG_TEST_NAME": test_database,
                PORT_VARIABLE: str(port),
            }
            command = [sys.executable, "-m", "pytest", "--reuse-db", *pytest_args]
            shown = " ".join(f"{k}={env[k]}" for k in ("DATABASE_URL", PORT_VARIABLE))
            print(f"{shown} {' '.join(command)}", flush=True)
            return subprocess.call(command, env=env)
    finally:
        # Once PgBouncer has stopped (the with block is left first), no pool holds it.
        drop_database(*server, test_database)


if __name__ == "__main__":
    sys.exit(main())
