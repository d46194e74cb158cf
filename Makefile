# bsft_saga developer tasks. `make demo` and `make test` are the two entry points the
# README promises; both bootstrap .venv on their own from nothing but python3 and make.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
# Targets run one after another: `make test` puts its suites side by side itself (its lanes,
# below), each with a Redis database and a Celery queue of its own.
.NOTPARALLEL:

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

# `make test` runs the SQLite, PostgreSQL and MariaDB suites under coverage.py (branch
# coverage of bsft_saga and of the Python subprocesses the suite starts: [tool.coverage] in
# pyproject.toml), then combines them and fails below the floor (fail_under there).
# COVERAGE=1 measures test-sqlite, test-postgres or test-mariadb on their own too (then
# `make coverage` reports); `make test COVERAGE=` runs without it. test-fast never measures.
COVERAGE ?=
export COVERAGE_FILE := $(CURDIR)/.coverage
PYTEST = $(if $(COVERAGE),$(VENV)/bin/coverage run -m pytest,$(VENV)/bin/pytest)

SQLITE_DATABASE_URL := sqlite:///$(CURDIR)/.test-db.sqlite3
PG_HOST ?= 127.0.0.1
PG_PORT ?= 5432
PG_USER ?= postgres
PG_DATABASE_URL := postgres://$(PG_USER)@$(PG_HOST):$(PG_PORT)/bsft_saga
# Run a second time through PgBouncer in transaction mode: the dispatcher's concurrency and
# failover tests, bulk starts, and the test that proves the connections really go through it.
PGBOUNCER_TESTS := tests/processes/test_pgbouncer.py tests/processes/test_failover.py tests/processes/test_timeouts_load.py \
	tests/delivery/test_dispatch_transactions.py tests/processes/test_timeouts_faults.py \
	tests/engine/test_engine_concurrency.py tests/delivery/test_abandoned_claims.py \
	tests/processes/test_dispatch_contention.py tests/processes/test_killed_loop.py \
	tests/test_publishing_many.py

# MariaDB 10.6+ (or MySQL 8.0.11+): pytest-django creates and drops a per-run
# `test_bsft_saga_<pid>` database (utf8mb4, READ COMMITTED: tests/settings.py); the
# `bsft_saga` database of MARIADB_DATABASE_URL is only where Django connects first.
MARIADB_HOST ?= 127.0.0.1
MARIADB_PORT ?= 3306
MARIADB_USER ?= root
MARIADB_DATABASE_URL := mysql://$(MARIADB_USER)@$(MARIADB_HOST):$(MARIADB_PORT)/bsft_saga

DEMO_DB := $(CURDIR)/sample_project/demo.sqlite3
DEMO_DATABASE_URL := sqlite:///$(DEMO_DB)
MANAGE := $(PY) manage.py

# Connects to the maintenance database and makes sure the `bsft_saga` database named in
# PG_DATABASE_URL exists (pytest-django creates and drops a per-run `test_bsft_saga_<pid>`).
define PG_CHECK
import psycopg
conn = psycopg.connect(host="$(PG_HOST)", port=$(PG_PORT), user="$(PG_USER)", dbname="postgres", connect_timeout=3, autocommit=True)
if conn.execute("SELECT 1 FROM pg_database WHERE datname = 'bsft_saga'").fetchone() is None:
    conn.execute("CREATE DATABASE bsft_saga")
conn.close()
endef
export PG_CHECK

# Connects to MariaDB, makes sure the `bsft_saga` database exists and that the server's time
# zone tables are loaded (Django's date lookups convert in the database; .ci/run loads them).
define MARIADB_CHECK
import sys, MySQLdb
conn = MySQLdb.connect(host="$(MARIADB_HOST)", port=$(MARIADB_PORT), user="$(MARIADB_USER)", connect_timeout=3)
cursor = conn.cursor()
cursor.execute("CREATE DATABASE IF NOT EXISTS bsft_saga CHARACTER SET utf8mb4")
cursor.execute("SELECT COUNT(*) FROM mysql.time_zone_name")
if not cursor.fetchone()[0]:
    sys.exit("MariaDB has no time zone tables: mariadb-tzinfo-to-sql /usr/share/zoneinfo | mariadb -u root mysql")
conn.close()
endef
export MARIADB_CHECK

.PHONY: help venv mysql-driver lint test test-suites test-fast test-sqlite test-postgres test-mariadb test-pgbouncer test-model coverage coverage-erase demo docs dist bench profile soak wheel clean distclean

help:
	@echo "make demo           set up .venv, run the sample project's sagas on SQLite end to end"
	@echo "make test           set up .venv, lint, the docs build, the suite on SQLite, PostgreSQL and MariaDB (two lanes side by side), coverage"
	@echo "make test-fast      ruff + mypy, the suite on SQLite without the tests marked slow (< 2 min)"
	@echo "make lint           ruff check, ruff format --check, mypy"
	@echo "make test-sqlite    the suite on SQLite   (PYTEST_ARGS='-k timers' to narrow)"
	@echo "make test-postgres  the suite on PostgreSQL at $(PG_HOST):$(PG_PORT)"
	@echo "make test-mariadb   the suite on MariaDB at $(MARIADB_HOST):$(MARIADB_PORT) (user $(MARIADB_USER))"
	@echo "make test-pgbouncer the dispatcher tests through a PgBouncer (transaction mode) it starts"
	@echo "make coverage       combine and report what COVERAGE=1 runs measured; fails below the floor"
	@echo "make test-model     the model of the public API, much longer (MODEL_EXAMPLES=3000; DATABASE_URL=... for PostgreSQL)"
	@echo "make bench          measure against hand-written Django on PostgreSQL (BENCH_SIZE=smoke: ~1 min)"
	@echo "make profile        where a fired timer's and a start event's Python time goes (flame graphs)"
	@echo "make soak           2 x 30 min of steady load on PostgreSQL: what drifts (BENCH_SOAK_MINUTES=1: ~3 min)"
	@echo "make docs           build the documentation site into site/ (strict: broken links fail)"
	@echo "make dist           build sdist + wheel, twine check, run the demo against the installed wheel"
	@echo "make wheel          build the wheel into dist/"
	@echo "make clean          remove build output and test databases (distclean: also .venv)"

venv: $(STAMP)

# Re-runs whenever pyproject.toml changes. setuptools>=77 is needed for the PEP 639
# `license = "MIT"` string, and setuptools + wheel live in the venv so that the packaging
# test can build with --no-isolation (no network round-trip for build deps).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip 'setuptools>=77' wheel
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy bsft_saga tests sample_project bench

test-sqlite: venv
	DATABASE_URL=$(SQLITE_DATABASE_URL) $(PYTEST) $(PYTEST_ARGS)

# Outside CI an unreachable PostgreSQL is reported and skipped; under CI=true it fails.
test-postgres: venv
	@if $(PY) -c "$$PG_CHECK"; then \
	    echo "DATABASE_URL=$(PG_DATABASE_URL) $(PYTEST) $(PYTEST_ARGS)"; \
	    DATABASE_URL=$(PG_DATABASE_URL) $(PYTEST) $(PYTEST_ARGS); \
	elif [ "$${CI:-}" = "true" ]; then \
	    echo "ERROR: PostgreSQL unreachable at $(PG_HOST):$(PG_PORT) (user $(PG_USER)); CI requires it" >&2; \
	    exit 1; \
	else \
	    echo "SKIPPED: PostgreSQL run — not reachable at $(PG_HOST):$(PG_PORT) (user $(PG_USER)); start it and run 'make test-postgres'"; \
	fi

# mysqlclient (the `mysql` extra) builds against the client library's headers, which a
# fresh machine may lack, so `make venv` does not install it: this does, and outside CI
# goes on without it when it will not build (the tests that need it then skip, saying so).
MYSQL_DRIVER_HINT := apt-get install default-libmysqlclient-dev build-essential pkg-config
mysql-driver: venv
	@if $(PY) -c "import MySQLdb" 2>/dev/null || $(PY) -m pip install --quiet -e '.[dev,mysql]'; then \
	    :; \
	elif [ "$${CI:-}" = "true" ]; then \
	    echo "ERROR: mysqlclient did not build ($(MYSQL_DRIVER_HINT)); CI requires it" >&2; \
	    exit 1; \
	else \
	    echo "NOTE: mysqlclient did not build; $(MYSQL_DRIVER_HINT) for the MariaDB tests"; \
	fi

# Outside CI an unreachable MariaDB, or no driver, is reported and skipped; under CI=true
# either fails.
test-mariadb: venv mysql-driver
	@if ! $(PY) -c "import MySQLdb" 2>/dev/null; then \
	    echo "SKIPPED: MariaDB run — mysqlclient is not installed; $(MYSQL_DRIVER_HINT), then run 'make test-mariadb'"; \
	elif $(PY) -c "$$MARIADB_CHECK"; then \
	    echo "DATABASE_URL=$(MARIADB_DATABASE_URL) $(PYTEST) $(PYTEST_ARGS)"; \
	    BSFT_SAGA_MARIADB_HOST=$(MARIADB_HOST) BSFT_SAGA_MARIADB_PORT=$(MARIADB_PORT) \
	    BSFT_SAGA_MARIADB_USER=$(MARIADB_USER) DATABASE_URL=$(MARIADB_DATABASE_URL) \
	        $(PYTEST) $(PYTEST_ARGS); \
	elif [ "$${CI:-}" = "true" ]; then \
	    echo "ERROR: MariaDB unreachable at $(MARIADB_HOST):$(MARIADB_PORT) (user $(MARIADB_USER)); CI requires it" >&2; \
	    exit 1; \
	else \
	    echo "SKIPPED: MariaDB run — not reachable at $(MARIADB_HOST):$(MARIADB_PORT) (user $(MARIADB_USER)); start it and run 'make test-mariadb'"; \
	fi

# Starts its own PgBouncer (tests/support/pgbouncer.py) on a free port in front of PG_HOST:PG_PORT.
# Outside CI a missing pgbouncer or PostgreSQL is reported and skipped; under CI=true it fails.
test-pgbouncer: venv
	@pgbouncer=$$(PATH="$$PATH:/usr/sbin" command -v pgbouncer || true); \
	if [ -z "$$pgbouncer" ]; then \
	    reason="pgbouncer is not installed (apt-get install pgbouncer)"; \
	elif ! $(PY) -c "$$PG_CHECK"; then \
	    reason="PostgreSQL not reachable at $(PG_HOST):$(PG_PORT) (user $(PG_USER))"; \
	else \
	    exec $(PY) -m tests.support.pgbouncer --pgbouncer "$$pgbouncer" --server-host $(PG_HOST) \
	        --server-port $(PG_PORT) --user $(PG_USER) $(PYTEST_ARGS) $(PGBOUNCER_TESTS); \
	fi; \
	if [ "$${CI:-}" = "true" ]; then \
	    echo "ERROR: PgBouncer run impossible: $$reason; CI requires it" >&2; \
	    exit 1; \
	fi; \
	echo "SKIPPED: PgBouncer run — $$reason; fix that and run 'make test-pgbouncer'"

test: COVERAGE = 1
test: venv mysql-driver lint docs coverage-erase test-suites coverage

# The four runs in two lanes side by side, as many as a small CI machine has cores: SQLite
# then MariaDB, and PostgreSQL then PgBouncer (the PostgreSQL run restarts its server once).
# Each line is prefixed with its lane. The lanes share no database; the second has a Redis
# database (POSTGRES_LANE_REDIS_URL) and a Celery queue of its own, since the worker tests
# flush the one and purge the other. LANES=1 runs the four one after another.
LANES ?= 2
POSTGRES_LANE_REDIS_URL ?= redis://127.0.0.1:6379/14
POSTGRES_LANE_ENV := CELERY_BROKER_URL=$(POSTGRES_LANE_REDIS_URL) BSFT_SAGA_CELERY_QUEUE=bsft_saga_postgres_lane
SUITE_MAKE = $(MAKE) --no-print-directory COVERAGE=$(COVERAGE)
test-suites: venv mysql-driver
	@if [ "$(LANES)" = "1" ]; then \
	    $(SUITE_MAKE) test-sqlite test-mariadb; \
	    $(POSTGRES_LANE_ENV) $(SUITE_MAKE) test-postgres test-pgbouncer; \
	    exit; \
	fi; \
	( $(SUITE_MAKE) test-sqlite test-mariadb 2>&1 | sed -u 's/^/[sqlite, mariadb] /' ) & first=$$!; \
	( $(POSTGRES_LANE_ENV) $(SUITE_MAKE) test-postgres test-pgbouncer 2>&1 \
	    | sed -u 's/^/[postgres, pgbouncer] /' ) & second=$$!; \
	failed=(); \
	wait $$first || failed+=("SQLite/MariaDB"); \
	wait $$second || failed+=("PostgreSQL/PgBouncer"); \
	if [ $${#failed[@]} -gt 0 ]; then echo "FAILED lanes: $${failed[*]} (search the output for their prefix)" >&2; exit 1; fi

# The data of the runs before is dropped first: a figure only counts this run's tests.
coverage-erase: venv
	$(VENV)/bin/coverage erase

# One data file per process (the suites and their subprocesses), combined into .coverage
# (already combined by an earlier `make coverage`: reported again as it is).
coverage: venv
	@if compgen -G '$(COVERAGE_FILE).*' >/dev/null; then $(VENV)/bin/coverage combine --quiet; fi
	$(VENV)/bin/coverage report

# The quick loop while working: everything but the subprocess, load and worker tests.
test-fast: venv lint
	DATABASE_URL=$(SQLITE_DATABASE_URL) $(VENV)/bin/pytest -m "not slow" $(PYTEST_ARGS)

# The stateful model of the public API (tests/model/) with many more examples than the
# suite runs: about 3,000 by default (MODEL_EXAMPLES to change it), on SQLite unless
# DATABASE_URL says otherwise. No pytest-timeout: it runs for as long as it takes.
MODEL_EXAMPLES ?= 3000
test-model: venv
	DATABASE_URL=$${DATABASE_URL:-$(SQLITE_DATABASE_URL)} HYPOTHESIS_PROFILE=model-long \
	    MODEL_EXAMPLES=$(MODEL_EXAMPLES) $(VENV)/bin/pytest tests/model -s -o timeout=0 $(PYTEST_ARGS)

# --strict: a broken link or anchor, or an API reference that no longer resolves, fails.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

demo: venv
	rm -f $(DEMO_DB)
	DATABASE_URL=$(DEMO_DATABASE_URL) $(MANAGE) migrate --noinput
	DATABASE_URL=$(DEMO_DATABASE_URL) $(MANAGE) run_demo

# Needs PostgreSQL at PG_HOST:PG_PORT. Works in its own database (bsft_saga_bench, created
# if missing) and never touches the test databases; BENCH_SIZE=smoke runs in about a minute.
bench: venv
	BENCH_PG_HOST=$(PG_HOST) BENCH_PG_PORT=$(PG_PORT) BENCH_PG_USER=$(PG_USER) BENCH_MARIADB_HOST=$(MARIADB_HOST) BENCH_MARIADB_PORT=$(MARIADB_PORT) BENCH_MARIADB_USER=$(MARIADB_USER) $(PY) -m bench.run

# Needs PostgreSQL at PG_HOST:PG_PORT, like `make bench` (its database, bsft_saga_bench):
# pyinstrument flame graphs of draining workload W and of publishing start events, in
# bench/results/profile-*.html (not committed), and the heaviest frames on stdout.
profile: venv
	BENCH_PG_HOST=$(PG_HOST) BENCH_PG_PORT=$(PG_PORT) BENCH_PG_USER=$(PG_USER) $(PY) -m bench.profile

# Needs PostgreSQL at PG_HOST:PG_PORT; not in CI, not in `make test`. Works in its own
# database (bsft_saga_soak, recreated for the run and dropped after it); about an hour at
# full length, BENCH_SOAK_MINUTES=1 runs it end to end in about three minutes.
soak: venv
	BENCH_PG_HOST=$(PG_HOST) BENCH_PG_PORT=$(PG_PORT) BENCH_PG_USER=$(PG_USER) $(PY) -m bench.soak

wheel: venv
	$(PY) -m build --wheel --outdir dist

# What a release uploads, checked as a user meets it: the sdist and the wheel built in
# isolation (from pyproject's build requirements alone), their metadata checked by twine,
# then the wheel installed into a fresh venv (the `testing` extra and django-environ are
# what the demo needs) and the sample project's demo run from a copy outside the checkout,
# so only the installed bsft_saga can be imported.
dist: venv
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	wheel=$$(echo $(CURDIR)/dist/*.whl); \
	echo "dist: installing $$wheel into a fresh venv in $$tmp"; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
	    "$$wheel[testing]" 'django-environ>=0.11'; \
	cp -R sample_project manage.py "$$tmp/"; \
	find "$$tmp/sample_project" \( -name '*.sqlite3' -o -name __pycache__ \) -prune -exec rm -rf {} +; \
	cd "$$tmp"; \
	unset PYTHONPATH DJANGO_SETTINGS_MODULE VIRTUAL_ENV; \
	where=$$(venv/bin/python -c 'import bsft_saga; print(bsft_saga.__file__)'); \
	echo "dist: bsft_saga imported from $$where"; \
	case "$$where" in "$$tmp/venv/"*) ;; \
	    *) echo "ERROR: bsft_saga was imported from $$where, not from the wheel" >&2; exit 1;; \
	esac; \
	export DATABASE_URL="sqlite:///$$tmp/demo.sqlite3"; \
	venv/bin/python manage.py migrate --noinput --verbosity 0; \
	venv/bin/python manage.py run_demo

clean:
	rm -rf build dist site *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
	rm -f .test-db.sqlite3 $(DEMO_DB) .coverage .coverage.*
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
