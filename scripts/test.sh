#!/usr/bin/env bash
# The test command: sets up .venv (with the docs extra), then runs the whole suite (slow learning
# checks and the documentation build included).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
cd "$root"
# the docs extra, so that tests/test_docs.py builds the site (with -W) instead of skipping;
# re-installed only when pyproject.toml or constraints.txt changed (a few seconds)
docs_stamp=.venv/.tdscheme-docs-installed
docs_want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$docs_stamp" ] || [ "$(cat "$docs_stamp")" != "$docs_want" ]; then
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[docs]"
  echo "$docs_want" > "$docs_stamp"
fi
.venv/bin/python -m ruff check tdscheme tests benchmarks examples
exec .venv/bin/python -m pytest "$@"
