# Chrono: `make demo` brings the platform up on this machine, `make test` runs every test.
# Both install what they need first (a virtualenv in .venv, Debian packages via `chrono services up`).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: install services migrate demo test test-cluster lint unit browser-tools clean-venv

$(STAMP): pyproject.toml
	rm -f $(VENV)/.installed-*
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

services: install
	$(BIN)/chrono services up

migrate: services
	$(BIN)/chrono migrate --noinput

demo: migrate
	$(BIN)/chrono demo

PY_PACKAGES := chronocore localservices search scheduler reaper workflows chronoadmin bench

# bandit warns "nosec encountered (B608), but no failed test" for each other piece of an f-string
# whose finding a `# nosec B608` suppressed (PyCQA/bandit#1204, bandit 1.9): those lines alone are
# dropped; the findings, and bandit's exit status, are kept.
lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	bash -o pipefail -c '$(BIN)/bandit -c pyproject.toml -q --severity-level medium \
	  -r $(PY_PACKAGES) 2>&1 | { grep -v "but no failed test" || true; }'

unit: install
	$(BIN)/python -m pytest tests/unit -q

# Debian's Chromium and its driver, for the browser tests (tests/browser).
browser-tools:
	@dpkg-query -W -f='$${db:Status-Abbrev}' chromium chromium-driver 2>/dev/null | grep -q '^ii ii' \
	  || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	       --no-install-recommends chromium chromium-driver; }

test: services lint browser-tools
	$(BIN)/python -m pytest --ignore=tests/cluster --durations=30

# The suites that start clusters of their own (Redis Cluster, three RabbitMQ nodes, a PostgreSQL
# standby) on loopback next to the services: slower, so apart from `make test`; CI runs both.
test-cluster: services
	$(BIN)/python -m pytest tests/cluster

clean-venv:
	rm -rf $(VENV)
