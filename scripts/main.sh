#!/usr/bin/env bash
# The main job: sets up .venv, then iterates a RayCollector on CartPole with 2 workers.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
exec "$root/.venv/bin/python" "$root/examples/collect_cartpole.py" "$@"
