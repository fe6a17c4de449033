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
  # The install leaves 1-2 GB of new files in memory, not yet on disk (1.0-1.8 GB "Dirty" in
  # /proc/meminfo at the end of it on our 2-core machine); the kernel writes them out from 30 s
  # on (vm.dirty_expire_centisecs), which is when a first `tdscheme train` starts Ray and its
  # workers. Waiting for those writes here (about 5 s) keeps them out of the first run.
  echo "setup.sh: writing the new .venv to disk (sync) ..."
  sync
  echo "$want" > "$stamp"
fi
# pip byte-compiled every installed package but tdscheme itself (an editable install): compile it
# here (0.05 s when up to date), or every process of a run (the driver, each Ray worker) compiles
# the modules it imports, on every run where PYTHONDONTWRITEBYTECODE is set (as on our machines).
.venv/bin/python -m compileall -q tdscheme
