# The two commands in the README: `make sample` and `make test`. Both create .venv on first use, installing the
# exact versions (with hashes) of requirements/lock-pyXY.txt for this Python; `make lock` re-resolves the locks.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PYV := $(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
LOCK := requirements/lock-py$(PYV).txt
STAMP := $(VENV)/.installed

.PHONY: sample test test-fast lint lock browser

$(STAMP): pyproject.toml $(LOCK)
	@test -f $(LOCK) || { echo "no lock for Python $(PYV): supported are 3.10-3.13 ($(LOCK) missing)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r $(LOCK)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

sample: $(STAMP)
	$(VENV)/bin/csts-pipeline run --dataset sample

test: $(STAMP)
	$(PY) -m pytest

# The unit tests alone (tests marked `slow`, those over ~10 s, are left out); `make test` runs everything, as CI does.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow" -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/hadolint Dockerfile

lock:
	requirements/refresh.sh

# The browser tests (annotation pages, the run report) drive Debian's Chromium through Playwright; CI installs it
# here so that a missing browser fails the run instead of skipping the tests.
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@chromium --version
