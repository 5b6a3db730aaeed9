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

.PHONY: sample test test-fast lint lock browser label-studio label-studio-test

$(STAMP): pyproject.toml $(LOCK)
	@test -f $(LOCK) || { echo "no lock for Python $(PYV): supported are 3.10-3.13 ($(LOCK) missing)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r $(LOCK)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

sample: $(STAMP)
	$(VENV)/bin/csts-pipeline run --dataset sample

test: $(STAMP) $(LS_STAMP) browser
	LABEL_STUDIO_VENV=$(abspath $(LS_VENV)) $(PY) -m pytest

# The unit tests alone (tests marked `slow`, those over ~10 s, are left out); `make test` runs everything, as CI does.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow" -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/hadolint Dockerfile

lock:
	requirements/refresh.sh

# Label Studio, for the round trip in tests/test_label_studio.py, in its own venv: it pins its own Django stack and
# must not enter the project's lock. Exact versions with hashes (requirements/label-studio.txt, made by uv from
# requirements/label-studio.in). `make test` creates it first, so a missing one fails the run instead of skipping.
$(LS_STAMP): requirements/label-studio.txt
	$(PYTHON) -m venv $(LS_VENV)
	$(LS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
		-r requirements/label-studio.txt
	touch $(LS_STAMP)

label-studio: $(LS_STAMP)

label-studio-test: $(STAMP) $(LS_STAMP) browser
	LABEL_STUDIO_VENV=$(abspath $(LS_VENV)) $(PY) -m pytest tests/test_label_studio.py

# The browser tests (annotation pages, the run report) drive Debian's Chromium through Playwright; CI installs it
# here so that a missing browser fails the run instead of skipping the tests.
browser:
	@if [ -n "$$CSTS_CHROMIUM" ]; then test -x "$$CSTS_CHROMIUM" || { echo "CSTS_CHROMIUM=$$CSTS_CHROMIUM: not an executable"; exit 1; }; \
	elif ! command -v chromium >/dev/null; then \
	  command -v apt-get >/dev/null || { echo "no chromium: install Chromium and set CSTS_CHROMIUM to it"; exit 1; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	fi
