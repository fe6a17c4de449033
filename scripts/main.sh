#!/usr/bin/env bash
# The main job: sets up .venv, then trains PPO on CartPole with 2 collectors (`tdscheme train`).
# Extra arguments go to `tdscheme train`, e.g. `bash scripts/main.sh a2c-cartpole --seed 1`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
exec "$root/.venv/bin/tdscheme" train "$@"
