#!/usr/bin/env bash
# Creates .venv (if needed) and installs tdscheme with its test extras, pinned by constraints.txt.
# Idempotent: re-runs only when pyproject.toml or constraints.txt changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
stamp=.venv/.tdscheme-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints.txt torch==2.13.0
  # envpool, atari, mujoco, loggers, tensorboard, video and peers: the EnvPool backend's, Atari's
  # (both backends), sac-halfcheetah's, the loggers', the videos' and the learning benchmark's
  # (SB3 and the RL Zoo's settings) tests run too
  .venv/bin/python -m pip install -q -c constraints.txt \
    -e ".[test,plot,envpool,atari,mujoco,loggers,tensorboard,video,peers]"
  echo "$want" > "$stamp"
fi
