"""Learning check (slow): ppo-cartpole on EnvPool clearly beats the random policy (return ~22).

One learning check per algorithm family runs in CI; this file keeps the one no other
check covers. The families' checks:

- PPO and APPO (gymnasium's CartPole, the presets' own settings): each reaches 475 with
  ``--num-learners 2`` in ``tests/cli/test_learner_groups_first_run.py``, whose two ranks are
  held to one learner on the whole batch, bit for bit, in ``tests/learner/test_group.py``;
  impala-cartpole shares APPO's loop and V-trace targets (run through the API in
  ``tests/presets/test_presets.py``).
- SAC: sac-pendulum reaches -200 with two ranks (same file; the ranks equal one learner in
  ``tests/learner/test_group_replay.py``).
- DQN: dqn-cartpole beats random through the command; with prioritized replay it and
  apex-dqn-cartpole reach 475 (``tests/presets/test_offpolicy.py``).
- Gradient workers: ``tests/gradient_workers/test_learning.py`` (each mode).
"""

from __future__ import annotations

import pytest

from tdscheme.engine import read_metrics
from tdscheme.presets import get_preset


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ppo_cartpole_on_envpool_beats_random(ray_clean, tmp_path):
    """EnvPool once collected fine but gave broken observations: only learning shows it."""
    pytest.importorskip("envpool", reason="EnvPool is not installed (tdscheme[envpool])")
    preset = get_preset("ppo-cartpole").override(
        {
            "env_backend": "envpool",
            "collector_resources": {"num_cpus": 0.5},
            "target_return": 200.0,  # random: ~22; the preset's own target is 475
            "total_frames": 100_000,
            "run_dir": str(tmp_path),
            "progress": False,
        }
    )
    with preset.build_trainer() as trainer:
        summary = trainer.run()
    assert summary["target_reached"], summary
    eval_returns = [value for _, value in read_metrics(tmp_path)["eval/return"]]
    assert eval_returns[-1] == summary["eval_return"] >= 200.0
