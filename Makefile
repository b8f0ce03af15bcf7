# `make run` and `make test` are the two commands a newcomer needs (see README).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SERVE_STAMP := $(VENV)/.serve-installed
BENCH_STAMP := $(VENV)/.bench-installed
# gcloud-tasks-emulator needs protobuf<5, google-cloud-ndb protobuf>=6: the emulator
# gets a virtualenv of its own, and the tests run it from there as a subprocess.
TASKS_VENV := .venv-tasks
TASKS_STAMP := $(TASKS_VENV)/.installed

.PHONY: run test bench simulate appserver-smoke clean

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

$(TASKS_STAMP): requirements-tasks-emulator.txt
	$(PYTHON) -m venv $(TASKS_VENV)
	$(TASKS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(TASKS_VENV)/bin/python -m pip install --quiet -r requirements-tasks-emulator.txt
	touch $(TASKS_STAMP)

# Serving needs only the runtime's requirements, not the test toolchain (a few seconds,
# not a minute and more). PORT=9000 listens there (as SUNDIAL_PORT does).
$(SERVE_STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(SERVE_STAMP)

run: $(SERVE_STAMP)
	$(PY) main.py serve $(if $(PORT),--port $(PORT))

# The browser tests (tests/ui) drive Debian's headless chromium through chromium-driver;
# the driver's path stands for both (the chromium-driver package requires chromium).
CHROMIUM := /usr/bin/chromedriver
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(CHROMIUM):
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  ($(SUDO) apt-get update && $(SUDO) apt-get install -y chromium chromium-driver)

# tests/alerts run docs/ALERTS.md's rules through promtool. Debian ships it only in the
# `prometheus` package, whose installation also starts a Prometheus server: promtool alone
# is taken out of the package (no maintainer script runs, so nothing starts). If that
# fails (no network, no apt), `make test` goes on and those tests skip.
PROMTOOL := /usr/local/bin/promtool

$(PROMTOOL):
	command -v promtool >/dev/null || { work=$$(mktemp -d) && \
	  ( cd $$work && $(SUDO) apt-get update -qq && apt-get download -qq prometheus && \
	    dpkg-deb -x prometheus_*.deb root && $(SUDO) install -D -m 755 root/usr/bin/promtool $@ ) || \
	  echo "promtool not installed: tests/alerts/test_promtool.py will skip"; rm -rf $$work; }

# Two pytest-xdist workers, each with whole files (module fixtures start once) and its own
# emulators: most of the suite waits on servers and schedules, and two overlap those waits.
# Files go out in collection order, the slowest collected first (tests/support/parallel.py),
# not xdist's default of the files with the most tests first, which left the slow ones,
# of a test or two each, for the end. `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 2

test: $(STAMP) $(TASKS_STAMP) $(CHROMIUM) $(PROMTOOL)
	$(PY) -m pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The benchmarks' extra dependencies (APScheduler for bench/versus.py); `make test` does not need them.
$(BENCH_STAMP): $(STAMP) requirements-bench.txt
	$(PY) -m pip install --quiet -r requirements-bench.txt
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) bench/core.py

# The deterministic simulator of the whole chain (sim/, docs/RELIABILITY.md): random seeds
# for SECONDS seconds, each failing seed printed with the command that replays it.
# `make test` runs a fixed set of seeds and the self-check (tests/sim).
SECONDS ?= 60

simulate: $(STAMP)
	$(PY) -m sim --seconds $(SECONDS)

# The app under the Cloud SDK's dev_appserver.py with app.yaml, on the emulators (about
# 50 s; docs/DEPLOY.md, "Trying the deployment locally"). Not part of `make test`.
appserver-smoke: $(STAMP) $(TASKS_STAMP)
	$(PY) -m tests.smoke.appserver_smoke

# pip's -c takes no extras (`google-api-core[grpc]`): constraints.txt is requirements.txt
# without them, for `pip install -c constraints.txt '.[gcp]'` (tests/unit/test_packaging.py
# fails when it falls behind requirements.txt).
constraints.txt: requirements.txt
	{ echo "# Generated from requirements.txt by \`make constraints.txt\`: the same pins without extras,"; \
	  echo "# as pip's -c takes them. Edit requirements.txt, then run that."; \
	  sed -E 's/^([A-Za-z0-9_.-]+)\[[^]]*\]/\1/' requirements.txt; } > $@

clean:
	rm -rf $(VENV) $(TASKS_VENV) .pytest_cache .hypothesis
