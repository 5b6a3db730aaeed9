#!/usr/bin/env bash
# Re-resolve the locks from pyproject.toml (run after changing a dependency range; commit the result).
# One lock per supported Python, Linux x86_64, exact versions with hashes; `make` and CI install from them.
set -euo pipefail
cd "$(dirname "$0")/.."
for v in 3.10 3.11 3.12 3.13; do
  uv pip compile pyproject.toml --extra cpu --extra ray --extra dev --generate-hashes --quiet \
    --python-version "$v" --python-platform x86_64-manylinux_2_28 \
    -c requirements/constraints.txt --overrides requirements/overrides.txt --no-header -o "requirements/lock-py${v/./}.txt"
done
