# The two commands in the README: `make sample` and `make test`. Both create .venv on first use, installing the
# exact versions (with hashes) of requirements/lock-pyXY.txt for this Python; `make lock` re-resolves the locks.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PYV := $(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
LOCK := requirements/lock-py$(PYV).txt
STAMP := $(VENV)/.installed
LS_VENV ?= .venv-label-studio
LS_STAMP := $(LS_VENV)/.installed

.PHONY: help sample test test-fast lint wheel-check lock browser label-studio label-studio-test
.DEFAULT_GOAL := help

help:  ## this list
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 20

$(STAMP): pyproject.toml $(LOCK)
	@test -f $(LOCK) || { echo "no lock for Python $(PYV): supported are 3.10-3.13 ($(LOCK) missing)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r $(LOCK)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

sample: $(STAMP)  ## run the whole pipeline on the embedded sample (runs/sample/)
	$(VENV)/bin/csts-pipeline run --dataset sample

test: $(STAMP) $(LS_STAMP) browser  ## the whole test suite, as CI runs it
	LABEL_STUDIO_VENV=$(abspath $(LS_VENV)) $(PY) -m pytest

# The unit tests alone (tests marked `slow`, those over ~10 s, are left out); `make test` runs everything, as CI does.
test-fast: $(STAMP)  ## the unit tests alone (no tests marked slow)
	$(PY) -m pytest -m "not slow" -q

lint: $(STAMP)  ## ruff, ruff format, mypy (the frame, the label statistics and the aggregation), hadolint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	PATH=$(abspath $(VENV))/bin:$$PATH .ci/typecheck
	$(VENV)/bin/hadolint Dockerfile

lock:  ## re-resolve requirements/lock-py*.txt from pyproject.toml
	requirements/refresh.sh

# Label Studio, for the round trip in tests/annotate/test_label_studio.py, in its own venv: it pins its own Django stack and
# must not enter the project's lock. Exact versions with hashes (requirements/label-studio.txt, made by uv from
# requirements/label-studio.in). `make test` creates it first, so a missing one fails the run instead of skipping.
$(LS_STAMP): requirements/label-studio.txt
	$(PYTHON) -m venv $(LS_VENV)
	$(LS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
		-r requirements/label-studio.txt
	touch $(LS_STAMP)

label-studio: $(LS_STAMP)  ## Label Studio in its own venv (.venv-label-studio/)

label-studio-test: $(STAMP) $(LS_STAMP) browser  ## the Label Studio round trip alone
	LABEL_STUDIO_VENV=$(abspath $(LS_VENV)) $(PY) -m pytest tests/annotate/test_label_studio.py

# The browser tests (annotation pages, the run report) drive Debian's Chromium through Playwright; CI installs it
# here so that a missing browser fails the run instead of skipping the tests.
browser:  ## Debian's chromium for the browser tests
	@if [ -n "$$CSTS_CHROMIUM" ]; then test -x "$$CSTS_CHROMIUM" || { echo "CSTS_CHROMIUM=$$CSTS_CHROMIUM: not an executable"; exit 1; }; \
	elif ! command -v chromium >/dev/null; then \
	  command -v apt-get >/dev/null || { echo "no chromium: install Chromium and set CSTS_CHROMIUM to it"; exit 1; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	fi

# The Docker image's install without Docker: the wheel from exactly the Dockerfile's COPY lines, into a clean venv
# with the lock, every command's --help and the sample run from an empty folder (.ci/check-wheel).
wheel-check: $(STAMP)  ## build and install the wheel as the image does, and run it from an empty folder
	PATH=$(abspath $(VENV))/bin:$$PATH .ci/check-wheel $(PYTHON)
