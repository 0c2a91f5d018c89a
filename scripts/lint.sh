#!/usr/bin/env bash
# The static gates CI runs before the tests: ruff lint, ruff format, mypy (pinned versions from
# the `dev` extra, the project's config in pyproject.toml). Needs .venv from
# `bash scripts/setup.sh --test`.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy zarrfs
