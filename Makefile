# Chrono: `make demo` brings the platform up on this machine, `make test` runs every test.
# Both install what they need first (a virtualenv in .venv, Debian packages via `chrono services up`).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: install services migrate demo test lint unit browser-tools clean-venv

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

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

unit: install
	$(BIN)/python -m pytest tests/unit -q

# Debian's Chromium and its driver, for the browser tests (tests/browser).
browser-tools:
	@dpkg-query -W -f='$${db:Status-Abbrev}' chromium chromium-driver 2>/dev/null | grep -q '^ii ii' \
	  || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	       --no-install-recommends chromium chromium-driver; }

test: services lint browser-tools
	$(BIN)/python -m pytest

clean-venv:
	rm -rf $(VENV)
