# Chrono: `make demo` brings the platform up on this machine, `make test` runs every test.
# Both install what they need first (a virtualenv in .venv, Debian packages via `chrono services up`).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: install services migrate demo test lint unit clean-venv

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

unit: install
	$(BIN)/python -m pytest tests/unit -q

test: services lint
	$(BIN)/python -m pytest

clean-venv:
	rm -rf $(VENV)
