# The two commands the README gives. Both build the virtualenv themselves from a bare clone.
#   make demo   the bundled legacy API behind mend, raw vs envelope, agent completion rates
#               (make demo ARGS=--keep-running: its flags, e.g. to leave it up afterwards)
#   make test   everything CI runs: system packages, the test suite, ruff and mypy --strict
#               (lint runs even when a test fails; make still fails if either did)

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow lint venv bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

ARGS ?=

demo: $(STAMP)
	$(PY) -m demo.run $(ARGS)

test: $(STAMP)
	bash scripts/install-system-deps
	status=0; $(PY) -m pytest || status=1; \
	$(MAKE) --no-print-directory lint || status=1; \
	exit $$status

# the suites marked slow (drains, long-polls, client libraries through mend); not in CI's run
test-slow: $(STAMP)
	bash scripts/install-system-deps
	$(PY) -m pytest -m slow

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

bench: $(STAMP)
	bash bench/run

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
