"""benchmarks/learning.py: the zoo's translation, CleanRL's adaptation, the tables, ``--redraw``.

Nothing here trains: the zoo's installed YAML is translated by its own ExperimentManager
(no env, no model), the CleanRL replacements run on a small synthetic script, and the
tables and figures are built from synthetic kept runs.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys

import pytest

from tests.benchmarks.scripts import BENCHMARKS, load_script

load_script("harness")
peers = load_script("learning_peers")
learning = load_script("learning")


#: Run in a child process: importing rl_zoo3 patches gymnasium's TimeLimit for the whole
#: process (its gym_patches), which must not leak into the other tests' envs.
_ZOO_CHECK = """
import json, sys
sys.path.insert(0, sys.argv[1])
import learning_peers as peers
out = {}
cartpole = peers.zoo_settings("ppo", "CartPole-v1", "CartPole-v1")
lr = cartpole["model_kwargs"]["learning_rate"]
out["cartpole"] = {
    "learning_rate": cartpole["entry"]["learning_rate"], "n_envs": cartpole["n_envs"],
    "n_steps": cartpole["model_kwargs"]["n_steps"], "n_timesteps": cartpole["n_timesteps"],
    "lr": [lr(1.0), lr(0.5)] if callable(lr) else None,
    "frame_stack": cartpole["frame_stack"], "normalize": cartpole["normalize"],
    "n_envs_in_model_kwargs": "n_envs" in cartpole["model_kwargs"],
}
try:
    import ale_py  # noqa: F401
except ImportError:
    print(json.dumps(out)); sys.exit()
pong = peers.zoo_settings("ppo", "PongNoFrameskip-v4", "atari", n_timesteps=2_000_000)
out["pong"] = {
    "n_envs": pong["n_envs"], "frame_stack": pong["frame_stack"],
    "n_timesteps": pong["n_timesteps"], "wrapped": pong["env_wrapper"] is not None,
    "policy": pong["model_kwargs"]["policy"], "clip": pong["model_kwargs"]["clip_range"](1.0),
}
cheetah = peers.zoo_settings("sac", "HalfCheetah-v5", "HalfCheetah-v4")
out["learning_starts"] = cheetah["model_kwargs"]["learning_starts"]
print(json.dumps(out))
"""


def test_zoo_translation_of_the_installed_cartpole_and_atari_entries():
    if importlib.util.find_spec("rl_zoo3") is None:  # not imported here: see _ZOO_CHECK
        pytest.skip("rl_zoo3 is not installed (the peers extra)")
    done = subprocess.run(
        [sys.executable, "-c", _ZOO_CHECK, str(BENCHMARKS)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    cartpole = out["cartpole"]
    assert cartpole["learning_rate"] == "lin_0.001"
    assert cartpole["n_envs"] == 8 and cartpole["n_steps"] == 32
    assert cartpole["n_timesteps"] == 100_000
    assert cartpole["lr"] == pytest.approx([0.001, 0.0005])
    assert cartpole["frame_stack"] is None and cartpole["normalize"] is None
    assert not cartpole["n_envs_in_model_kwargs"]  # the zoo's keys are not SB3 arguments

    if "pong" not in out:
        pytest.skip("ale_py is not installed")
    pong = out["pong"]
    assert (pong["n_envs"], pong["frame_stack"], pong["n_timesteps"]) == (8, 4, 2_000_000)
    assert pong["wrapped"] and pong["policy"] == "CnnPolicy"
    assert pong["clip"] == pytest.approx(0.1)
    assert out["learning_starts"] == 10_000


SCRIPT = """import os
import time

import gym
import numpy as np
import tyro
from torch.utils.tensorboard import SummaryWriter


class RecordEpisodeStatistics(gym.Wrapper):
    def __init__(self, env, deque_size=100):
        super().__init__(env)
        self.num_envs = getattr(env, "num_envs", 1)

    def reset(self, **kwargs):
        observations = super().reset(**kwargs)
        return observations

    def step(self, action):
        observations, rewards, dones, infos = super().step(action)
        return observations, rewards, dones, infos


if __name__ == "__main__":
    args = tyro.cli(Args)
    envs.num_envs = args.num_envs
    print(f"global_step={global_step}, episodic_return={info['r'][idx]}")
"""


def test_cleanrl_adaptation_of_a_synthetic_script_reports_every_replacement():
    new, report = peers.adapt_source(
        SCRIPT, peers.cleanrl_replacements(), importable=lambda name: False
    )
    compile(new, "adapted.py", "exec")
    status = {r["old"].splitlines()[0]: r["status"] for r in report}
    assert status["import gym"] == "applied" and "import gymnasium as gym\n" in new
    assert status["args = tyro.cli(Args)"] == "applied"
    assert f"json.loads(os.environ[{peers.CLEANRL_ARGS_ENV!r}])" in new and "tyro" not in new
    assert "dones = np.logical_or(terminated, truncated)" in new
    assert "observations, _ = super().reset(**kwargs)" in new
    assert "envs.num_envs = args.num_envs" not in new
    assert "self.single_action_space = env.single_action_space" in new
    assert "class SummaryWriter:" in new and "torch.utils.tensorboard" not in new
    assert status["envs.single_action_space = envs.action_space"] == "missing"  # not in SCRIPT
    assert status["np.bool8"] == "not needed"
    assert "wall_s={time.time() - _bench_started:.3f}" in new

    kept, report = peers.adapt_source(
        SCRIPT, peers.cleanrl_replacements(), importable=lambda name: True
    )
    assert "from torch.utils.tensorboard import SummaryWriter\n" in kept
    assert "skipped: tensorboard is installed" in [r["status"] for r in report]

    out = "SPS: 12\nglobal_step=1024, episodic_return=-21.0, wall_s=12.5\n"
    assert peers.parse_cleanrl_stdout(out) == [[1024, 12.5, -21.0, 1]]


def _record(framework, seed, evals, train=(), task="cartpole", budget=100_000):
    settings = {
        "config": {"trainer": {"eval_episodes": 10, "eval_every_frames": 8192}},
        "zoo_file": "rl_zoo3/hyperparams/ppo.yml", "zoo_key": "CartPole-v1",
        "env_id": "CartPole-v1", "entry": {"n_envs": 8}, "versions": {"rl_zoo3": "x"},
        "eval": {"episodes": 10, "every_steps": 8192},
        "source": {"sha256": "0" * 64}, "args": {"env_id": "Pong-v5"},
        "replacements": [{"old": "import gym", "reason": "r", "count": 1, "status": "applied"}],
    }  # fmt: skip
    return peers.RunRecord(task, framework, seed, budget, "ok", None, 1.0, ["cmd"], settings,
                           [list(e) for e in evals], [list(t) for t in train])  # fmt: skip


TDSCHEME = [
    _record("tdscheme ppo-cartpole", 0, [(10_000, 10.0, 200.0), (20_000, 20.0, 480.0)]),
    _record(
        "tdscheme ppo-cartpole",
        1,
        [(10_000, 12.0, 300.0), (20_000, 24.0, 400.0), (30_000, 36.0, 490.0)],
    ),  # fmt: skip
    _record("tdscheme ppo-cartpole", 2, [(10_000, 8.0, 476.0)]),
]
SB3 = [
    _record("SB3 PPO (RL Zoo)", 0, [(25_000, 50.0, 100.0), (50_000, 100.0, 475.0)]),
    _record(
        "SB3 PPO (RL Zoo)",
        1,
        [(25_000, 40.0, 100.0), (50_000, 80.0, 300.0), (100_000, 160.0, 450.0)],
    ),  # fmt: skip
]


def test_table_medians_over_seeds_and_time_to_target():
    section = learning.sections()["cartpole"]
    table = learning.section_table(
        section, {"tdscheme ppo-cartpole": TDSCHEME, "SB3 PPO (RL Zoo)": SB3}, "eval"
    )
    header, tdscheme, sb3 = table
    assert header[2] == "final (@100%)" and header[6:8] == ["agent steps to 475", "wall s to 475"]
    assert tdscheme[1:4] == ["3/3 ok", "480.0 [476.0–490.0]", "476.0 [400.0–480.0]"]
    assert tdscheme[6:] == ["20,000 [10,000–30,000] (3/3)", "20.0 [8.0–36.0]", "0.20x SB3"]
    assert sb3[2] == "462.5 [450.0–475.0]" and sb3[6:] == ["50,000 (1/2)", "100.0", "–"]

    # a stopped run: no final value and nothing past its last point (a run ended at its
    # target holds its last value to the end, as tdscheme's seed 0 above)
    stopped = dataclasses.replace(
        _record("x", 0, [(10_000, 10.0, 100.0), (40_000, 40.0, 300.0)]), outcome="failed"
    )
    row = learning.section_table(section, {"x": [stopped]}, "eval")[1]
    assert row[1:6] == ["0/1 ok (failed), stopped at 40,000 steps", "–", "100.0", "–", "–"]

    halfcheetah = learning.sections()["halfcheetah"]  # no target: the SB3 runs' median final
    assert learning.resolve_target(halfcheetah, {"SB3 SAC (RL Zoo)": SB3}, "eval") == 462.5

    rows = [[100, 1.0, 10.0, 1], [200, 2.0, 20.0, 1], [300, 3.0, 40.0, 2]]
    assert learning.smooth_train(rows, window=3) == [[100, 1.0, 10.0], [200, 2.0, 15.0],
                                                    [300, 3.0, 100.0 / 3]]  # fmt: skip
    train = [_record("x", s, [], rows) for s in (0, 1)]
    assert (
        learning.section_table(section, {"x": train}, "train")[1][2] == "27.5 [27.5–27.5]"
    )  # window 10: all 4 episodes


def test_redraw_rebuilds_the_page_and_figures_from_kept_runs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    data = tmp_path / "learning"
    cleanrl = _record(peers.CLEANRL_NAME, 0, [], [(50_000, 30.0, -21.0, 1), (90_000, 60.0, -19.0, 1)],
                      task="pong", budget=100_000)  # fmt: skip
    ppo_pong = _record("tdscheme ppo-pong", 0, [(100_000, 70.0, -20.0)], task="pong")
    one, two = (_record(f"tdscheme sac-halfcheetah{v}", 0, [(100_000, 90.0, r)], task="halfcheetah")
                for v, r in (("", 3000.0), (" (2 learners)", 2500.0)))  # fmt: skip
    for record in [*TDSCHEME, *SB3, cleanrl, ppo_pong, one, two]:
        path = learning.record_path(data, record.task, record.framework, record.seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dataclasses.asdict(record)))
    out = tmp_path / "learning.md"
    load_script("report")  # what learning.py's main imports from benchmarks/ (its script folder)
    assert learning.main(["--redraw", "--out", str(out)]) == 0
    page = out.read_text()
    for section in ("cartpole", "pong"):
        png = tmp_path / f"learning_{section}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"![{section}](learning_{section}.png)" in page
    assert "## pong-async" not in page  # only pong's peers: not a section of its own
    # a variant's section shows its runs beside the base section's own (1 learner vs 2)
    variant = page.split("## halfcheetah-learners")[1]
    assert "| tdscheme sac-halfcheetah (2 learners) | 1/1 ok | 2,500.0 |" in variant
    assert "| tdscheme sac-halfcheetah | 1/1 ok | 3,000.0 |" in variant
    assert "(2 learners)" not in page.split("## halfcheetah-learners")[0]
    assert "| tdscheme ppo-cartpole | 3/3 ok | 480.0 [476.0–490.0] |" in page
    assert "## CleanRL's script, adapted at run time" in page
    assert "== cartpole: evaluation return" in capsys.readouterr().out
