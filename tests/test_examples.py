"""Each example runs as a user would run it, with a tiny frame budget, and cleans up after itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# slow: each example runs as a subprocess, as a user runs it
pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TINY_ARGS = {
    # one worker where the example's path is the same with one
    "collect_cartpole.py": [
        "--total-frames",
        "1000",
        "--frames-per-batch",
        "500",
        "--envs-per-collector",
        "4",
        "--num-collectors",
        "1",
    ],
    "gradient_workers_cartpole.py": [
        "--mode",
        "decentralized",
        "--steps",
        "3",
        "--frames-per-batch",
        "64",
        "--num-envs",
        "1",
    ],
    "train_ppo_cartpole.py": ["--total-frames", "2048", "--num-collectors", "1"],  # one batch
    "impala_cartpole.py": ["--total-frames", "2048", "--num-collectors", "1"],  # 4 batches
    "learner_group_cartpole.py": ["--updates", "3", "--num-envs", "4"],
    "ppo_own_loop.py": ["--total-frames", "1024", "--frames-per-batch", "1024"],
    # 128 updates: the weights pushed every 16, the episodes read every 64
    "sac_pendulum_replay.py": [
        "--total-frames",
        "640",
        "--random-frames",
        "512",
        "--batch-size",
        "64",
    ],
    # 40 episodes: the curriculum judges its 32 most recent
    "curriculum_mountaincar.py": ["--total-frames", "8192"],
    "torchrl_script_ppo.py": ["--total-frames", "512", "--frames-per-batch", "512"],
    "impala_pong.py": ["--total-frames", "480", "--num-envs", "2"],
}


@pytest.mark.parametrize("name", sorted(TINY_ARGS))
def test_example_runs(ray_clean, name):
    """The example joins the session's Ray through ``RAY_ADDRESS``, as a user's script joins a
    running cluster (Ray's own rule), and leaves no actor behind (``ray_clean``)."""
    address = ray_clean.get_runtime_context().gcs_address
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *TINY_ARGS[name]],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "RAY_ADDRESS": address},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout.strip(), "the example printed nothing"


def test_every_example_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(TINY_ARGS)
