#!/usr/bin/env bash
# The test command: sets up .venv, then runs the whole suite (slow learning checks included).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
cd "$root"
.venv/bin/python -m ruff check tdscheme tests benchmarks examples
exec .venv/bin/python -m pytest "$@"
